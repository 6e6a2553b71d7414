"""Money is read as people say it when normalization is on (issue 45 item 4): dollars and cents,
元, 角 and 分, where WeText alone reads a decimal ("forty two point five dollars", 四十二点五零元)."""
from __future__ import annotations

import pytest

from inference.text.normalize import normalize

# (written, read): the real normalizer, English or Chinese as the text's script decides.
CASES = [
    ("$42.50", "forty two dollars and fifty cents"),
    ("$1", "one dollar"),
    ("$0.99", "ninety nine cents"),
    ("$1.01", "one dollar and one cent"),
    ("$0.01", "one cent"),
    ("$5", "five dollars"),
    ("$5.00", "five dollars"),
    ("$10.10", "ten dollars and ten cents"),
    ("$1,250.75", "one thousand two hundred and fifty dollars and seventy five cents"),
    ("$1,000,000", "one million dollars"),
    ("€3.20", "three euros and twenty cents"),
    ("€1", "one euro"),
    ("£5.05", "five pounds and five pence"),
    ("£1.01", "one pound and one penny"),
    ("¥100", "one hundred yen"),
    ("¥1.5", "one point five yen"),  # yen has no hundredths: a decimal
    ("$3.5 million", "three point five million dollars"),
    ("$1,250 million", "one thousand two hundred and fifty million dollars"),
    ("$0.125 each", "zero point one two five dollars each"),  # finer than cents: a decimal
    ("-$5", "minus five dollars"),
    ("It costs $4.50.", "It costs four dollars and fifty cents."),
    ("I paid $12 and got $7.25 back.", "I paid twelve dollars and got seven dollars and twenty five cents back."),
    # An amount before punctuation other than a full stop (issue 58): a comma ends the amount as
    # much as a full stop does, where only a comma before three digits continues it.
    ("$42.50, please.", "forty two dollars and fifty cents, please."),
    ("£1.01, then", "one pound and one penny, then"),
    ("1,250, then", "one thousand two hundred and fifty, then"),
    ("$1,234.56, in all", "one thousand two hundred and thirty four dollars and fifty six cents, in all"),
    ("-$5, owed", "minus five dollars, owed"),
    ("$3.5 million, raised", "three point five million dollars, raised"),
    ("It is 3.14 meters, not 42.50.", "It is three point one four meters, not forty two point five oh."),  # no currency
    ("42.50元", "四十二元五角"),
    ("42.55元", "四十二元五角五分"),
    ("3.05元", "三元零五分"),
    ("100元", "一百元"),
    ("1,000元", "一千元"),
    ("0.5元", "五角"),
    ("0.01元", "一分"),
    ("10.10元", "十元一角"),
    ("1.00元", "一元"),
    ("价格是¥42.50。", "价格是四十二元五角。"),
    ("价格是￥42.50。", "价格是四十二元五角。"),
    ("价格是￥1,000.50。", "价格是一千元五角。"),
    ("花了£5。", "花了五英镑。"),
    ("花了￡5。", "花了五英镑。"),
    ("花了€3。", "花了三欧元。"),
    ("花了€3.20。", "花了三点二欧元。"),  # another currency: a decimal, as said
    ("花了$42.50。", "花了四十二点五美元。"),
    ("花了42.50美元。", "花了四十二点五美元。"),
    ("约3.5万元。", "约三点五万元。"),
    # A sign before 万 or 亿 (issue 58): the amount is read with its scale, then the currency, as
    # people say it and as written without the sign ("3.5万元"); WeText alone reads "¥50万" 五元零万.
    ("融资¥50万元，另有$5000万，以及¥3.5万。", "融资五十万元，另有五千万美元，以及三点五万元。"),
    ("¥50万", "五十万元"),
    ("￥1.25亿元", "一点二五亿元"),
    ("$5000万", "五千万美元"),
    ("$1.5亿美元", "一点五亿美元"),
    ("€5万", "五万欧元"),
    ("£3千万", "三千万英镑"),
    # An amount before an ASCII comma in Chinese text, as in English.
    ("花了¥42.50,还剩¥3。", "花了四十二元五角,还剩三元。"),
    ("花了$42.50,还剩$3。", "花了四十二点五美元,还剩三美元。"),
    ("圆周率约3.14，增长了42.50%。", "圆周率约三点一四，增长了百分之四十二点五零。"),  # no currency
]


@pytest.mark.parametrize("written, read", CASES, ids=[c[0] for c in CASES])
def test_money_is_read_as_people_say_it(written, read):
    assert normalize(written) == read
