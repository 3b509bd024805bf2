#!/usr/bin/env python3
"""Which engine got each request of a benchmark run, and when: from a `llmbus serve --log-level debug`
log (the input processors' `generate_accepted` lines name the engine; the api server's
`request_done` lines the end).

    sim_routing_detail.py --log SERVE.log --completion-tokens N [--json]

Only requests that produced N tokens count (the run's, not the warm-up's). Prints, per engine, how
many requests it got, when each was routed (seconds from the run's first) and when its last one
ended: an engine that got more than its share sets the run's end. --json prints one object
(requests_per_engine, max_over_mean, routers, last_done_s per engine) for sim-scale.sh's results.
"""
import argparse
import collections
import datetime
import json
import re

ROUTED = re.compile(r"ts=(\S+) .*actor=input_processor .*instance=(\S+) event=generate_accepted "
                    r"request_id=(cmpl-[0-9a-f]+)-\S+ .* engine=(\S+) decode_engine")
DONE = re.compile(r"ts=(\S+) .*event=request_done id=(cmpl-[0-9a-f]+) .*completion_tokens=(\d+)")


def seconds(ts):
    return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", required=True)
    ap.add_argument("--completion-tokens", type=int, required=True)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    routed, done = {}, {}
    with open(a.log, errors="replace") as f:
        for line in f:
            m = ROUTED.match(line)
            if m:
                routed[m.group(3)] = (seconds(m.group(1)), m.group(4), m.group(2))
                continue
            m = DONE.match(line)
            if m and int(m.group(3)) == a.completion_tokens:
                done[m.group(2)] = seconds(m.group(1))
    ids = [i for i in done if i in routed]
    if not ids:
        print(json.dumps({}) if a.json else "no routed request of that length in the log")
        return
    t0 = min(routed[i][0] for i in ids)
    per = collections.defaultdict(list)
    for i in ids:
        per[routed[i][1]].append((routed[i][0] - t0, done[i] - t0))
    counts = {e: len(v) for e, v in per.items()}
    mean = len(ids) / len(per)
    summary = dict(requests_per_engine=counts, max_over_mean=max(counts.values()) / mean,
                   routers=len({routed[i][2] for i in ids}),
                   last_done_s={e: round(max(d for _, d in v), 2) for e, v in per.items()})
    if a.json:
        print(json.dumps(summary))
        return
    print(f"{len(ids)} requests over {len(per)} engines through {summary['routers']} input processor(s); "
          f"max / mean per engine {summary['max_over_mean']:.2f}")
    for e in sorted(per, key=lambda x: (len(x), x)):
        rs = sorted(per[e])
        print(f"engine {e}: {len(rs)} requests, last done {max(d for _, d in rs):.1f} s; routed at "
              + " ".join(f"{t:.1f}" for t, _ in rs))


if __name__ == "__main__":
    main()
