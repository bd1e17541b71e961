"""The seed's NVMe-oF initiator (PyPI `nvmeof`, through the `ibverbs` wheel),
unmodified, against a target: connect, identify namespace 1, then three
rounds of write and read-back with verified data. Prints one JSON line: how
far it got, what it raised and when, so a fault's effect is recorded as
measured. Exit 0 when every round verified.

    python io.py HOST NQN SOURCE [TIMEOUT_S]

NVMEOF_MODULE names another module with the same API to run instead
(`rctb.nvmeof`, rctb's own Python initiator).
"""

import importlib
import json
import os
import sys
import time

nvmeof = importlib.import_module(os.environ.get("NVMEOF_MODULE", "nvmeof"))


def main() -> int:
    host, nqn, source = sys.argv[1], sys.argv[2], sys.argv[3]
    timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 10.0
    out = {"connected": False, "lba_size": None, "rounds_verified": 0, "error": None}
    t0 = time.monotonic()
    try:
        with nvmeof.Controller.connect(host, nqn, source=source, timeout=timeout) as c:
            out["connected"] = True
            ns = c.namespace(1)
            out["lba_size"] = ns.lba_size
            blocks = 8
            size = blocks * ns.lba_size
            for r in range(3):
                data = bytes((i * 7 + 3 + r * 11) & 0xFF for i in range(size))
                with c.allocate(size) as buf:
                    buf.write(data)
                    ns.write(buf, slba=16 + r * blocks, blocks=blocks)
                with c.allocate(size) as buf:
                    ns.read(buf, slba=16 + r * blocks, blocks=blocks)
                    if buf.read() != data:
                        out["error"] = f"round {r}: data read back differs from what was written"
                        break
                out["rounds_verified"] = r + 1
    except Exception as e:  # what the initiator raises is the measurement
        out["error"] = f"{type(e).__name__}: {e}"
    out["seconds"] = round(time.monotonic() - t0, 2)
    print(json.dumps(out))
    return 0 if out["rounds_verified"] == 3 else 1


if __name__ == "__main__":
    sys.exit(main())
