# The data stage (RECIPE.md §5): sample corpus -> robots.txt snapshot -> per-source filter jobs
# -> dedup per language -> thresholds, PII and the corpus -> the filter funnel.
# Code: apertus/data/. Config: `data:` (config/README.md). Tests: tests/data/.

from apertus.data.config import DataConfig, resolve_source
from apertus.data.steps import local_files

DATA = config["data"]
DATA_SAMPLE = stage_path("data", "sample")
DATA_SNAPSHOT = stage_path("data", "robots", "snapshot.json")
DATA_CLASSIFIERS = stage_path("data", "classifiers")
DATATROVE_LOGS = str(RUN_DIR / "logs" / "data" / "datatrove")
# The classifiers data_classifiers trains: ngram always, xlmr heads when no `head` is given.
DATA_TRAINED = [
    task
    for task in ("quality", "toxicity")
    if getattr(DataConfig.from_dict(DATA), task).trained
]
DATA_SOURCE_FILES = {
    source.name: [
        str(p) for p in local_files(resolve_source(source, Path(DATA_SAMPLE)))
    ]
    for source in DataConfig.from_dict(DATA).sources
}
DATA_LABELS = [
    (
        stage_path("data", "sample", "labels", f"{task}.jsonl")
        if DATA[task]["labels"] == "sample"
        else DATA[task]["labels"]
    )
    for task in DATA_TRAINED
    if not DATA[task]["labels"].startswith("hf://")
]
DATA_FILTERED = [
    stage_path("data", "filtered", source["name"], str(shard))
    for source in DATA["sources"]
    for shard in range(source["shards"])
]


rule data_sample:
    output:
        web=stage_path("data", "sample", "web.jsonl.gz"),
        edu=stage_path("data", "sample", "edu.jsonl.gz"),
        code=stage_path("data", "sample", "code.jsonl.gz"),
        quality=stage_path("data", "sample", "labels", "quality.jsonl"),
        toxicity=stage_path("data", "sample", "labels", "toxicity.jsonl"),
        planted=stage_path("data", "sample", "planted.json"),
        manifest=stage_path("data", "sample", "manifest.json"),
    log:
        log_path("data", "sample"),
    benchmark:
        benchmark_path("data", "sample")
    threads: 1
    resources:
        **stage_job_resources("data"),
    params:
        code=step_code("apertus.data.make_sample"),
        config=stage_config("data", "sample"),
        sample_dir=lambda wildcards, output: os.path.dirname(output.planted),
    shell:
        "python -m apertus.data.make_sample --config {params.config:q}"
        " --manifest {output.manifest} --output-dir {params.sample_dir} > {log} 2>&1"


rule data_robots:
    input:
        sources=[f for files in DATA_SOURCE_FILES.values() for f in files],
    output:
        snapshot=DATA_SNAPSHOT,
        manifest=stage_path("data", "robots", "manifest.json"),
    log:
        log_path("data", "robots"),
    benchmark:
        benchmark_path("data", "robots")
    # Not a cluster job: fetches robots.txt files (real runs), nodes may lack network.
    localrule: True
    threads: 1
    resources:
        **stage_job_resources("data"),
    params:
        code=step_code("apertus.data.robots_snapshot"),
        config=stage_config("data", "sources", "robots"),
        sample_dir=lambda wildcards, input: DATA_SAMPLE,
        datatrove_logs=f"{DATATROVE_LOGS}/robots",
    shell:
        "python -m apertus.data.robots_snapshot --config {params.config:q}"
        " --manifest {output.manifest} --output {output.snapshot}"
        " --sample-dir {params.sample_dir} --datatrove-logs {params.datatrove_logs} > {log} 2>&1"


rule data_classifiers:
    input:
        labels=DATA_LABELS,
    output:
        models=directory(
            expand(stage_path("data", "classifiers", "{task}"), task=DATA_TRAINED)
        ),
        manifest=stage_path("data", "classifiers", "manifest.json"),
    log:
        log_path("data", "classifiers"),
    benchmark:
        benchmark_path("data", "classifiers")
    threads: stage_threads("data")
    resources:
        **stage_job_resources("data"),
    params:
        code=step_code("apertus.data.train_classifiers"),
        config=stage_config("data", "quality", "toxicity"),
        models_dir=lambda wildcards, output: os.path.dirname(output.manifest),
        sample_dir=lambda wildcards, input: DATA_SAMPLE,
        datatrove_logs=f"{DATATROVE_LOGS}/classifiers",
    shell:
        "python -m apertus.data.train_classifiers --config {params.config:q}"
        " --manifest {output.manifest} --output-dir {params.models_dir}"
        " --sample-dir {params.sample_dir} --datatrove-logs {params.datatrove_logs} > {log} 2>&1"


rule data_filter:
    input:
        sources=lambda wildcards: DATA_SOURCE_FILES[wildcards.source],
        snapshot=[DATA_SNAPSHOT] if DATA["robots"]["enabled"] else [],
        classifiers=rules.data_classifiers.output.models if DATA_TRAINED else [],
    output:
        out=directory(stage_path("data", "filtered", "{source}", "{shard}")),
        removed=directory(stage_path("data", "removed", "filter-{source}-{shard}")),
        manifest=stage_path("data", "filtered", "{source}", "{shard}.manifest.json"),
    log:
        log_path("data", "filter-{source}-{shard}"),
    benchmark:
        benchmark_path("data", "filter-{source}-{shard}")
    wildcard_constraints:
        source="|".join(DATA_SOURCE_FILES),
        shard=r"\d+",
    threads: stage_threads("data")
    resources:
        **stage_job_resources("data"),
    params:
        code=step_code("apertus.data.filter"),
        config=stage_config(
            "data",
            "sources",
            "robots",
            "language",
            "heuristics",
            "quality",
            "toxicity",
            "removed",
        ),
        snapshot=lambda wildcards, input: DATA_SNAPSHOT,
        models_dir=lambda wildcards, input: DATA_CLASSIFIERS,
        sample_dir=lambda wildcards, input: DATA_SAMPLE,
        datatrove_logs=f"{DATATROVE_LOGS}/filter-{{source}}-{{shard}}",
    shell:
        "python -m apertus.data.filter --config {params.config:q} --manifest {output.manifest}"
        " --source {wildcards.source} --shard {wildcards.shard} --output-dir {output.out}"
        " --removed-dir {output.removed}"
        " --snapshot {params.snapshot} --classifiers-dir {params.models_dir}"
        " --sample-dir {params.sample_dir} --threads {threads}"
        " --datatrove-logs {params.datatrove_logs} > {log} 2>&1"


rule data_dedup:
    input:
        filtered=DATA_FILTERED,
    output:
        out=directory(stage_path("data", "dedup")),
        removed=directory(stage_path("data", "removed", "dedup")),
        manifest=stage_path("data", "dedup.manifest.json"),
    log:
        log_path("data", "dedup"),
    benchmark:
        benchmark_path("data", "dedup")
    threads: stage_threads("data")
    resources:
        **stage_job_resources("data"),
    params:
        code=step_code("apertus.data.dedup"),
        config=stage_config("data", "dedup", "removed"),
        datatrove_logs=f"{DATATROVE_LOGS}/dedup",
    shell:
        "python -m apertus.data.dedup --config {params.config:q} --manifest {output.manifest}"
        " $(printf -- ' --input-dir %s' {input.filtered}) --output-dir {output.out}"
        " --removed-dir {output.removed}"
        " --work-dir {output.out}.work --threads {threads}"
        " --datatrove-logs {params.datatrove_logs} > {log} 2>&1"


rule data_select:
    input:
        dedup=rules.data_dedup.output.out,
    output:
        out=directory(stage_path("data", "corpus")),
        removed=directory(stage_path("data", "removed", "select")),
        manifest=stage_path("data", "corpus.manifest.json"),
    log:
        log_path("data", "select"),
    benchmark:
        benchmark_path("data", "select")
    threads: 1
    resources:
        **stage_job_resources("data"),
    params:
        code=step_code("apertus.data.select"),
        config=stage_config("data", "quality", "toxicity", "pii", "output", "removed"),
        datatrove_logs=f"{DATATROVE_LOGS}/select",
    shell:
        "python -m apertus.data.select --config {params.config:q} --manifest {output.manifest}"
        " --input-dir {input.dedup} --output-dir {output.out} --removed-dir {output.removed}"
        " --datatrove-logs {params.datatrove_logs} > {log} 2>&1"


rule data_funnel:
    input:
        steps=[
            *DATA_FILTERED,
            rules.data_dedup.output.out,
            rules.data_select.output.out,
        ],
    output:
        json=stage_path("data", "funnel.json"),
        plot=report(
            stage_path("data", "funnel.png"),
            caption="../report/data_funnel.rst",
            category="1. Data",
            labels={"what": "filter funnel"},
        ),
        manifest=stage_path("data", "funnel.manifest.json"),
    log:
        log_path("data", "funnel"),
    benchmark:
        benchmark_path("data", "funnel")
    # Not a cluster job: sums the filter stages' counts.
    localrule: True
    threads: 1
    resources:
        **stage_job_resources("data"),
    params:
        code=step_code("apertus.data.funnel"),
        config=stage_config("data"),
    shell:
        "python -m apertus.data.funnel --config {params.config:q} --manifest {output.manifest}"
        " $(printf -- ' --input-dir %s' {input.steps})"
        " --json {output.json} --plot {output.plot} > {log} 2>&1"


rule data_probes:
    output:
        out=directory(stage_path("data", "probes")),
        manifest=stage_path("data", "probes.manifest.json"),
    log:
        log_path("data", "probes"),
    benchmark:
        benchmark_path("data", "probes")
    threads: 1
    resources:
        **stage_job_resources("data"),
    params:
        code=step_code("apertus.data.probes"),
        config=stage_config("data", "probes"),
    shell:
        "python -m apertus.data.probes --config {params.config:q} --manifest {output.manifest}"
        " --output-dir {output.out} > {log} 2>&1"


if not POSTTRAIN_ONLY:

    TARGETS.extend([rules.data_select.output.manifest, rules.data_funnel.output.json])
