#!/usr/bin/env bash
# Regenerates the example reference voices with Debian's espeak-ng (apt-get install espeak-ng sox).
# Synthetic voices keep the examples free to ship: no recording of a real person is involved.
# The transcripts in voices.json must stay word for word what is spoken here (ultimate cloning
# continues from the clip and needs its exact text).
set -euo pipefail
cd "$(dirname "$0")/voices"
say() { # name, espeak voice, speed (words per minute), pitch, text
  espeak-ng -v "$2" -s "$3" -p "$4" -w "$1.tmp.wav" "$5"
  # 16-bit mono at 16 kHz (the rate the model encodes references at), trimmed of leading/trailing silence, peak at -3 dBFS.
  sox "$1.tmp.wav" -b 16 -c 1 -r 16000 "$1.wav" silence 1 0.02 0.5% reverse silence 1 0.02 0.5% reverse pad 0.1 0.1 norm -3
  rm "$1.tmp.wav"
}
say narrator_en en-us+m3 150 45 "The quick brown fox jumps over the lazy dog, and then it takes a long nap in the sun."
say guide_en en-gb+f3 155 60 "Welcome to the museum. Please keep your ticket with you while you visit the galleries."
say speaker_zh cmn+f2 190 55 "今天天气很好，我们一起去公园散步吧。"
