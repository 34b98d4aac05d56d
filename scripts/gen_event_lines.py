"""Write goondan/runtime/eventlines.py: one JSON-line function per runtime event class.

The functions are generated from the event classes (``goondan.runtime.eventlog.line_source``)
and kept as a module, so that the event log's writer compiles nothing at run time.
``tests/runtime/test_eventlog.py`` fails when the file is out of date; run this script after
adding or changing an event class: ``.venv/bin/python scripts/gen_event_lines.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from goondan.runtime.eventlog import event_lines_module  # noqa: E402

TARGET = ROOT / "goondan" / "runtime" / "eventlines.py"


def main() -> int:
    TARGET.write_text(event_lines_module(), encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
