"""Step `data_robots`: the robots.txt snapshot of every host the sources' URLs mention.

    python -m apertus.data.robots_snapshot --config JSON --manifest M --output snapshot.json ...

From a directory of `<host>.txt` files (the embedded default ships one for its sample hosts) or,
in real runs (`directory: null`), fetched from the web: bounded concurrency, timeouts, cached
and date-stamped (apertus.data.robots).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from apertus.core.config import shipped_path
from apertus.core.stage import StepRun, run_main
from apertus.data.config import DataConfig
from apertus.data.readers import make_reader
from apertus.data.steps import data_parser, source_paths, sources_of


def main(argv=None):
    from apertus.data.robots import (
        fetch_snapshot,
        snapshot_from_directory,
        url_host,
        write_snapshot,
    )

    parser = data_parser(__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    cfg = DataConfig.from_dict(args.config)
    robots = cfg.robots
    inputs = source_paths(cfg, args.sample_dir)
    directory = shipped_path(robots.directory) if robots.directory else None
    if directory:
        inputs.append(directory)
    with StepRun(
        "data", "robots", args.config, inputs=inputs, outputs=[args.output], manifest=args.manifest
    ) as step:
        hosts: set[str] = set()
        documents_without_url = 0
        for source in sources_of(cfg, args.sample_dir):
            for doc in make_reader(source, limit=source.limit).run():
                host = url_host(doc.metadata.get("url", ""))
                if host:
                    hosts.add(host)
                else:
                    documents_without_url += 1
        if directory:
            snapshot = snapshot_from_directory(directory, hosts)
        else:
            snapshot = fetch_snapshot(
                hosts,
                Path(robots.cache_dir),
                concurrency=robots.concurrency,
                timeout=robots.timeout,
                max_age_days=robots.max_age_days,
            )
        write_snapshot(args.output, snapshot)
        statuses = Counter(entry["status"] for entry in snapshot["hosts"].values())
        step.summary.update(
            hosts=len(hosts),
            documents_without_url=documents_without_url,
            statuses=dict(statuses),
            method=snapshot.get("method"),
        )


if __name__ == "__main__":
    run_main(main)
