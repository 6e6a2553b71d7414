"""app.py's start-up checks (its options are in options.py): each problem a user can cause becomes a
short StartupError that says what is wrong and what to do, found before anything slow (the port
before torch is imported, the checkpoint folder before gigabytes are read). app.py prints it in
one or two lines and exits 2.

Deliberately free of gradio and the engine, so that the checks answer in about a second.
"""
from __future__ import annotations

import errno
import math
import os
import socket
from pathlib import Path

from options import build_parser

LORA_FIX = ("To fix: pass --lora the folder of an official VoxCPM2 LoRA fine-tuning, made for this model, or "
            "leave --lora out to serve the model as it is.")


def to_fix(first: str) -> str:
    """The second line of every no-checkpoint error: the specific fix, then the two ways around it."""
    return (f"To fix: {first}, or pass a complete downloaded copy with --model /path/to/VoxCPM2, or try "
            "the interface with --random-weights (a tiny random model; its output is noise).")


class StartupError(Exception):
    """A start-up problem the user can fix; the message is what app.py prints (one or two lines)."""


def check_limits(args) -> None:
    """Every numeric option, before anything loads: an impossible value would otherwise surface as
    odd refusals later, or only once the model had loaded (--max-streams)."""
    whole = {"--max-streams": args.max_streams, "--max-queue": args.max_queue, "--prepare-threads": args.prepare_threads,
             "--max-text-chars": args.max_text_chars, "--max-upload-mb": args.max_upload_mb,
             "--max-voices": args.max_voices, "--max-library-mb": args.max_library_mb}
    for flag, value in whole.items():
        if value < 1:
            raise StartupError(f"{flag} is {value}; it must be 1 or more.\n{_fix_limit(flag)}")
    if not 0 <= args.normalize_processes <= 64:
        raise StartupError(f"--normalize-processes is {args.normalize_processes}; it must be between 0 (on the intake "
                           f"threads) and 64.\n{_fix_limit('--normalize-processes')}")
    positive = {"--max-audio-seconds": args.max_audio_seconds, "--upload-ttl-min": args.upload_ttl_min}
    for flag, value in positive.items():
        if not (math.isfinite(value) and value > 0):
            raise StartupError(f"{flag} is {value:g}; it must be a number above 0.\n{_fix_limit(flag)}")
    if not (math.isfinite(args.prebuffer_ms) and 0 <= args.prebuffer_ms <= 10_000):
        raise StartupError(f"--prebuffer-ms is {args.prebuffer_ms:g}; it must be between 0 and 10000.\n"
                           f"{_fix_limit('--prebuffer-ms')}, which suits most connections")
    if args.port is not None and not 1 <= args.port <= 65535:
        raise StartupError(f"--port is {args.port}; it must be between 1 and 65535.\n"
                           "To fix: pass a free port above 1023, e.g. --port 7860, or leave it out.")


def check_server(args) -> None:
    """An event loop or parser asked for by name must be installed (asyncio and h11 always are; uvloop
    and httptools are packages of their own): uvicorn would otherwise fail only once the port is taken."""
    import importlib.util

    for flag, name in (("--loop", args.loop), ("--http", args.http)):
        if name != "auto" and importlib.util.find_spec(name) is None:
            raise StartupError(f"{flag} {name}: {name} is not installed.\nTo fix: pip install {name}, "
                               f"or leave {flag} out (auto takes it when it is there).")


def _fix_limit(flag: str) -> str:
    default = build_parser().get_default(flag.removeprefix("--").replace("-", "_"))
    return f"To fix: pass a value in range, or leave {flag} out for its default ({default:g})"


def bind_port(host: str, port: int) -> socket.socket:
    """The listening socket, bound now so that a busy port is reported before the model loads; the
    server is then handed this very socket, so nothing can take the port in between."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise StartupError(f"cannot listen on {host!r}: the name does not resolve ({exc.strerror}).\n"
                           "To fix: pass --host 127.0.0.1 (this machine only) or --host 0.0.0.0 (all interfaces).")
    sock = socket.socket(family, kind, proto)
    if os.name != "nt":  # as uvicorn does: a restart must not wait for old connections' TIME_WAIT
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise StartupError(_bind_failure(host, port, exc)) from exc
    sock.set_inheritable(True)
    return sock


def _bind_failure(host: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (f"port {port} on {host} is already in use (is the demo already running?).\n"
                f"To fix: stop what is using it, or pick another port: --port {port + 1 if port < 65535 else 7860}")
    if exc.errno == errno.EACCES:
        return (f"no permission to listen on port {port}.\n"
                "To fix: pick a port above 1023, e.g. --port 7860")
    return (f"cannot listen on {host} port {port}: {exc.strerror or exc}.\n"
            "To fix: pass --host 127.0.0.1 or an address of this machine, or another --port.")


def check_device(device: str | None) -> str:
    """cpu, cuda or cuda:N, refused at once where CUDA is asked for and torch cannot use it."""
    import torch

    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    name = device.strip().lower()
    kind, _, index = name.partition(":")
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()) or (kind == "cpu" and index):
        raise StartupError(f"unknown device {device!r}.\n"
                           "To fix: use --device cuda (or cuda:N for the N-th GPU) or --device cpu, "
                           "or leave it out to use a GPU when there is one.")
    if kind == "cuda":
        _check_cuda(torch, device, int(index or 0))
    return name


def _check_cuda(torch, device: str, index: int) -> None:
    if not torch.cuda.is_available():
        build = ("this torch build has no CUDA" if torch.version.cuda is None
                 else f"torch {torch.__version__} finds no usable NVIDIA GPU or driver")
        raise StartupError(f"--device {device} asks for a GPU, but {build}.\n"
                           "To fix: leave --device out (or pass --device cpu) to run on the CPU, or install "
                           "the CUDA build of torch on a machine with an NVIDIA GPU and driver.")
    count = torch.cuda.device_count()
    if index >= count:
        raise StartupError(f"--device {device} asks for GPU {index}, but torch sees {count} "
                           f"(cuda:0 to cuda:{count - 1}).\nTo fix: pass one of those, or --device cuda.")


def check_gpus(gpus: int | None, device: str) -> list[str]:
    """The devices to load one engine on each: cuda:0 .. cuda:N-1 for --device cuda (N = --gpus, else
    every visible GPU), or the one device named."""
    if device != "cuda":
        if gpus is not None and gpus != 1:
            raise StartupError(f"--gpus {gpus} asks for several GPUs, but the device is {device}.\n"
                               "To fix: leave --device out (or pass --device cuda) to spread over GPUs, "
                               "or leave --gpus out.")
        return [device]
    import torch

    count = torch.cuda.device_count()
    wanted = count if gpus is None else gpus
    if not 1 <= wanted <= count:
        raise StartupError(f"--gpus is {gpus}; torch sees {count} GPU{'s' if count != 1 else ''}.\n"
                           f"To fix: pass a number from 1 to {count}, or leave --gpus out to use them all.")
    return [f"cuda:{i}" for i in range(wanted)]


def check_dtype(dtype: str | None, device: str) -> str:
    """bfloat16 or float32. float16 (which the engine's loader knows) is refused here: the model
    was trained and numerically matched in bfloat16 and float32 only, and float16's narrow range
    is untested on it."""
    from inference.model.loader import DTYPES

    if dtype is None:
        return "bfloat16" if device.startswith("cuda") else "float32"
    if dtype not in DTYPES or DTYPES[dtype] == DTYPES["float16"]:
        said = "float16 is not supported" if dtype in DTYPES else f"unknown dtype {dtype!r}"
        raise StartupError(f"{said}.\nTo fix: use --dtype bfloat16 (the default on a GPU) "
                           "or --dtype float32 (the default on the CPU), or leave it out.")
    return dtype


def is_folder_name(name: str) -> bool:
    """A local folder (existing, or written like a path) rather than a hub id."""
    from inference.model.checkpoint import looks_like_path

    return Path(name).expanduser().exists() or looks_like_path(name)


def check_folder(name: str) -> Path:
    """A local checkpoint folder with every file the loader reads: which one is missing, if any."""
    from inference.model.checkpoint import MODEL_FILES, VAE_FILES

    folder = Path(name).expanduser().resolve()
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise StartupError(f"the checkpoint folder {folder} {what}.\n"
                           + to_fix("check the path, or give the hub id openbmb/VoxCPM2 to download it"))
    # Each file the loader reads, any of its accepted names, and the one openbmb/VoxCPM2 publishes.
    needed = ((("config.json",), "config.json"), (MODEL_FILES, "model.safetensors"),
              (VAE_FILES, "audiovae.pth"), (("tokenizer.json", "tokenizer.model"), "tokenizer.json"))
    for names, published in needed:
        if not any((folder / n).is_file() for n in names):
            missing = " (or ".join(names) + ")" * (len(names) - 1)
            raise StartupError(f"the checkpoint folder {folder} is incomplete: it has no {missing}.\n"
                               + to_fix(f"copy {published} from the openbmb/VoxCPM2 repository into it"))
    return folder


def check_lora(name: str | None) -> None:
    """--lora as a local folder: the files the official training saves, found before anything loads."""
    from inference.model.lora import LoRAError, lora_files, resolve_lora

    if name is not None and is_folder_name(name):
        try:
            lora_files(resolve_lora(name))
        except LoRAError as exc:
            raise StartupError(f"{exc}.\n{LORA_FIX}") from None


def hub_failure(name: str, exc: BaseException) -> StartupError:
    """The download of a hub id failed: offline or unreachable hub, or a refusal (unknown id, gated)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import LocalEntryNotFoundError  # here since long before 0.23, the floor

    cause = exc.__cause__ or exc
    if isinstance(cause, LocalEntryNotFoundError):
        offline = constants.HF_HUB_OFFLINE
        why = "HF_HUB_OFFLINE is set" if offline else "the Hugging Face hub cannot be reached"
        what = f"it is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and {why}"
        fix = "unset HF_HUB_OFFLINE to download it" if offline else "connect to the network once to download it"
    else:  # the hub answered: an unknown id, a gated repository, a server error
        text = str(cause).strip().splitlines()
        what = f"the Hugging Face hub refused it ({type(cause).__name__}: {text[0] if text else ''})"
        fix = "check the id (openbmb/VoxCPM2) and your Hugging Face login"
    return StartupError(f"cannot get the checkpoint {name!r}: {what}.\n{to_fix(fix)}")


def load_failure(exc: BaseException) -> StartupError:
    """Anything else that stops the load: a checkpoint that does not match, memory, a broken install."""
    from inference.errors import CheckpointError
    from inference.model.lora import LoRAError

    text = str(exc).strip().splitlines()
    first = text[0] if text else type(exc).__name__
    if isinstance(exc, LoRAError):
        return StartupError(f"cannot load the LoRA: {first}\n{LORA_FIX}")
    if isinstance(exc, CheckpointError):
        return StartupError(f"cannot load the checkpoint: {first}\n"
                            + to_fix("check that the folder is a VoxCPM2 checkpoint"))
    return StartupError(f"start-up failed: {type(exc).__name__}: {first}\n"
                        "The log has the details with --log-level debug.")
