"""A long translation soak: `minitransformer translate` over a stream of 100,000 sentences read
from a pipe, with its resident memory sampled all along.

    python bench/soak_translate.py --checkpoint runs/builtin-tiny/checkpoints/final.npz
    python bench/soak_translate.py --checkpoint C --sentences 20000 --beam 1

The sentences are the built-in task's 500 test sentences, repeated, written into the
command's standard input by a thread of this script as fast as the pipe takes them, as
`cat corpus.en | minitransformer translate ...` would (the command translates a stream of any
length a few thousand lines at a time, so its memory must not grow with the stream). Its
translations are read and counted as they come out; every SAMPLE_SECONDS its resident memory
(VmRSS in /proc/PID/status, Linux) is recorded with the number of translations out so far.

Results: bench/results/soak_translate.<machine>.json, the samples and a summary: the memory
when the first translations came out and at the end, the largest, and the throughput.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from machine import ROOT, commit, kind, machine

SAMPLE_SECONDS = 0.5


def resident_mb(pid: int) -> float | None:
    """The resident memory of process ``pid`` in MiB, None once it has ended."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a checkpoint of the built-in task")
    parser.add_argument("--sentences", type=int, default=100_000)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None,
                        help="results file (default bench/results/soak_translate.<machine>.json)")
    args = parser.parse_args()
    if not Path("/proc/self/status").is_file():
        sys.exit("soak_translate.py reads resident memory from /proc: run it on Linux.")

    sys.path.insert(0, str(ROOT))
    from minitransformer.translation.corpus import load_corpus

    test = [source for source, _ in load_corpus("builtin", splits=["test"]).test]
    stream = [test[i % len(test)] for i in range(args.sentences)]
    command = [sys.executable, "-m", "minitransformer", "translate", "--checkpoint",
               str(args.checkpoint), "--beam", str(args.beam)]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=ROOT)
    start = time.perf_counter()

    def write() -> None:
        for sentence in stream:
            process.stdin.write(sentence.encode() + b"\n")
        process.stdin.close()

    translated = [0]

    def read() -> None:
        for _ in process.stdout:
            translated[0] += 1

    threads = [threading.Thread(target=write), threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    samples = []
    while process.poll() is None:
        rss = resident_mb(process.pid)
        if rss is not None:
            samples.append({"seconds": round(time.perf_counter() - start, 2),
                            "translated": translated[0], "rss_mib": round(rss, 1)})
        time.sleep(SAMPLE_SECONDS)
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    error = process.stderr.read().decode()
    if process.returncode != 0 or translated[0] != args.sentences:
        sys.exit(f"translate ended with status {process.returncode} after {translated[0]} of "
                 f"{args.sentences} translations:\n{error}")
    working = [s for s in samples if s["translated"] > 0]
    summary = {
        "sentences": args.sentences, "beam": args.beam, "seconds": round(seconds, 1),
        "sentences_per_s": round(args.sentences / seconds, 1),
        "rss_mib_at_first_translations": working[0]["rss_mib"] if working else None,
        "rss_mib_at_end": samples[-1]["rss_mib"], "rss_mib_max": max(s["rss_mib"]
                                                                     for s in samples),
    }
    result = {"command": " ".join(command[1:]), "summary": summary, "machine": machine(),
              "commit": commit(), "samples": samples}
    out = args.out or ROOT / "bench" / "results" / f"soak_translate.{kind()}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
