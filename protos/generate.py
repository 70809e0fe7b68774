"""Generate the Python stubs of protos/eor.proto with grpcio-tools (run from anywhere):

    python -m protos.generate          # writes protos/eor_pb2.py, eor_pb2.pyi, eor_pb2_grpc.py
    python -m protos.generate --check  # exit 1 if the committed stubs are stale

The stubs are committed (so a checkout imports without a generation step) and never edited
by hand; re-run this after changing eor.proto.
"""
from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTO = "protos/eor.proto"
OUTPUTS = ("eor_pb2.py", "eor_pb2.pyi", "eor_pb2_grpc.py")


def generate(out_root: Path) -> None:
    from grpc_tools import protoc

    (out_root / "protos").mkdir(parents=True, exist_ok=True)
    # -I at the repo root: the generated imports read `from protos import eor_pb2`
    rc = protoc.main(["grpc_tools.protoc", f"-I{ROOT}", f"--python_out={out_root}", f"--pyi_out={out_root}",
                      f"--grpc_python_out={out_root}", str(ROOT / PROTO)])
    if rc != 0:
        raise SystemExit(f"protoc failed ({rc})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare with the committed stubs")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        stale = [n for n in OUTPUTS if not (ROOT / "protos" / n).exists()
                 or not filecmp.cmp(Path(tmp) / "protos" / n, ROOT / "protos" / n, shallow=False)]
        if args.check:
            if stale:
                print(f"stale stubs: {stale}; run python -m protos.generate", file=sys.stderr)
                return 1
            return 0
        for n in OUTPUTS:
            shutil.copyfile(Path(tmp) / "protos" / n, ROOT / "protos" / n)
    print(f"generated {', '.join(OUTPUTS)} from {PROTO}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
