"""Where the tests read the real QA data: ../shared/data beside the checkout (never copied
into the repo), or $EOR_TEST_DATA_DIR."""
from __future__ import annotations

import os
from pathlib import Path

SHARED_DATA = Path(os.environ.get("EOR_TEST_DATA_DIR",
                                  Path(__file__).resolve().parents[2] / "shared" / "data"))
CORPUS_FILE = SHARED_DATA / "corpus.jsonl"
QUESTIONS_FILE = SHARED_DATA / "questions.dev.jsonl"
