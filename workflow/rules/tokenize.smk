# The tokenization stage (RECIPE.md §1, §5): held-out split -> tokenizer -> held-out texts and
# token shards per source -> pretraining data phases (indexes over the shards).
# Code: apertus/tokenize/. Config: `tokenize:` (config/README.md). Tests: tests/tokenize/.

TOKENIZE = config["tokenize"]
# One shard set per source of the corpus the data stage writes, plus the planted memorization
# probes, which live outside the corpus (the held-out split and the tokenizer never see them).
TOKENIZE_SOURCES = [source["name"] for source in config["data"]["sources"]]
if config["data"]["probes"]["enabled"]:
    TOKENIZE_SOURCES.append("probes")
# The sources each phase draws from (its weights; a weight of 0 still needs the source's shards):
# a phase's index is rebuilt when these shards change, not when another phase's do. Names are
# unique and weights name tokenized sources (apertus.plan_check, called by common.smk).
TOKENIZE_PHASES = {phase["name"]: phase for phase in TOKENIZE["phases"]}
# The shards a phase reads: the sources its weights name, directly or through a selection.
TOKENIZE_PHASE_SOURCES = {
    name: [
        source
        for source in TOKENIZE_SOURCES
        if source in phase["weights"]
        or source in [s["source"] for s in (phase.get("select") or {}).values()]
    ]
    for name, phase in TOKENIZE_PHASES.items()
}
TOKENIZE_HELDOUT_IDS = stage_path("tokenize", "split", "heldout_ids.json")
TOKENIZE_TOKENIZER = stage_path("tokenize", "tokenizer")


rule tokenize_split:
    input:
        corpus=rules.data_select.output.out,
    output:
        ids=TOKENIZE_HELDOUT_IDS,
        manifest=stage_path("tokenize", "split", "manifest.json"),
    log:
        log_path("tokenize", "split"),
    benchmark:
        benchmark_path("tokenize", "split")
    threads: 1
    resources:
        **stage_job_resources("tokenize"),
    params:
        code=step_code("apertus.tokenize.steps"),
        config=stage_config("tokenize", "heldout"),
    shell:
        "python -m apertus.tokenize.steps split --config {params.config:q}"
        " --manifest {output.manifest} --corpus {input.corpus} --output {output.ids} > {log} 2>&1"


rule tokenize_tokenizer:
    input:
        corpus=rules.data_select.output.out,
        heldout=TOKENIZE_HELDOUT_IDS,
    output:
        out=directory(TOKENIZE_TOKENIZER),
        manifest=stage_path("tokenize", "tokenizer.manifest.json"),
    log:
        log_path("tokenize", "tokenizer"),
    benchmark:
        benchmark_path("tokenize", "tokenizer")
    threads: 1
    resources:
        **stage_job_resources("tokenize"),
    params:
        code=step_code("apertus.tokenize.steps"),
        config=stage_config("tokenize", "tokenizer"),
    shell:
        "python -m apertus.tokenize.steps tokenizer --config {params.config:q}"
        " --manifest {output.manifest} --corpus {input.corpus} --heldout {input.heldout}"
        " --output {output.out} > {log} 2>&1"


rule tokenize_heldout:
    input:
        corpus=rules.data_select.output.out,
        heldout=TOKENIZE_HELDOUT_IDS,
        tokenizer=TOKENIZE_TOKENIZER,
    output:
        out=directory(stage_path("tokenize", "heldout")),
        manifest=stage_path("tokenize", "heldout.manifest.json"),
    log:
        log_path("tokenize", "heldout"),
    benchmark:
        benchmark_path("tokenize", "heldout")
    threads: 1
    resources:
        **stage_job_resources("tokenize"),
    params:
        code=step_code("apertus.tokenize.steps"),
        config=stage_config("tokenize", "heldout"),
    shell:
        "python -m apertus.tokenize.steps heldout --config {params.config:q}"
        " --manifest {output.manifest} --corpus {input.corpus} --heldout {input.heldout}"
        " --tokenizer {input.tokenizer} --output {output.out} > {log} 2>&1"


rule tokenize_shards:
    input:
        corpus=lambda wildcards: (
            rules.data_probes.output.out
            if wildcards.source == "probes"
            else rules.data_select.output.out
        ),
        heldout=TOKENIZE_HELDOUT_IDS,
        tokenizer=TOKENIZE_TOKENIZER,
    output:
        out=directory(stage_path("tokenize", "shards", "{source}")),
        manifest=stage_path("tokenize", "shards", "{source}.manifest.json"),
    log:
        log_path("tokenize", "shards-{source}"),
    benchmark:
        benchmark_path("tokenize", "shards-{source}")
    wildcard_constraints:
        source="|".join(TOKENIZE_SOURCES),
    threads: stage_threads("tokenize")
    resources:
        **stage_job_resources("tokenize"),
    params:
        code=step_code("apertus.tokenize.steps"),
        config=stage_config("tokenize", "shards"),
        datatrove_logs=lambda wildcards: str(
            RUN_DIR / "logs" / "tokenize" / "datatrove" / wildcards.source
        ),
    shell:
        "python -m apertus.tokenize.steps shards --config {params.config:q}"
        " --manifest {output.manifest} --corpus {input.corpus} --heldout {input.heldout}"
        " --tokenizer {input.tokenizer} --source {wildcards.source} --output {output.out}"
        " --threads {threads} --datatrove-logs {params.datatrove_logs} > {log} 2>&1"


rule tokenize_phase:
    input:
        shards=lambda wildcards: expand(
            stage_path("tokenize", "shards", "{source}"),
            source=TOKENIZE_PHASE_SOURCES[wildcards.phase],
        ),
    output:
        out=directory(stage_path("tokenize", "phases", "{phase}")),
        manifest=stage_path("tokenize", "phases", "{phase}.manifest.json"),
    log:
        log_path("tokenize", "phase-{phase}"),
    benchmark:
        benchmark_path("tokenize", "phase-{phase}")
    wildcard_constraints:
        phase="|".join(TOKENIZE_PHASES),
    threads: 1
    resources:
        **stage_job_resources("tokenize"),
    params:
        code=step_code("apertus.tokenize.steps"),
        # Only this phase's entry: changing another phase re-plans that one alone.
        config=lambda wildcards: canonical_json(
            {"phases": [TOKENIZE_PHASES[wildcards.phase]]}
        ),
        shards=lambda wildcards, input: " ".join(
            f"{name}={path}"
            for name, path in zip(
                TOKENIZE_PHASE_SOURCES[wildcards.phase], input.shards
            )
        ),
    shell:
        "python -m apertus.tokenize.steps phase --config {params.config:q}"
        " --manifest {output.manifest} --name {wildcards.phase} --shards {params.shards}"
        " --output {output.out} > {log} 2>&1"


if not POSTTRAIN_ONLY:

    TARGETS.extend(
        [
            rules.tokenize_heldout.output.manifest,
            *expand(
                rules.tokenize_phase.output.manifest,
                phase=list(TOKENIZE_PHASES),
            ),
        ]
    )
