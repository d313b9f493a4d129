"""Parses a /metrics answer with prometheus_client's own parser for its
format and prints what it read, one JSON line per metric family:
{"name", "type", "help", "samples": [[name, labels, value], ...]}.

usage: metrics_parse.py text|openmetrics FILE

`text` is the classic text format 0.0.4
(prometheus_client.parser), `openmetrics` OpenMetrics 1.0.0
(prometheus_client.openmetrics.parser, which also checks the exposition:
the `# EOF`, counters' `_total`, histograms' buckets). A parser error fails
the script.
"""

import json
import math
import sys

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families as text_families


def value(v):
    # JSON has no infinities: those go as text.
    return v if math.isfinite(v) else repr(v)


def main():
    fmt, path = sys.argv[1], sys.argv[2]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    parse = {"text": text_families, "openmetrics": openmetrics_families}[fmt]
    for family in parse(text):
        print(
            json.dumps(
                {
                    "name": family.name,
                    "type": family.type,
                    "help": family.documentation,
                    "samples": [
                        [s.name, s.labels, value(s.value)] for s in family.samples
                    ],
                }
            )
        )


if __name__ == "__main__":
    main()
