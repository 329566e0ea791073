# Export and evaluation (RECIPE.md §8): every pretraining stage's final checkpoint -> a Hugging
# Face folder with a verification card -> lm-eval on the project's task suite and the
# memorization probes; the chat models (SFT, QRPO) also through the instruct suite, with their
# chat template -> one table across checkpoints.
# Code: apertus/export/, apertus/evaluate/. Config: `export:`, `evaluate:` (config/README.md).
# Tests: tests/export/, tests/evaluate/.

EVALUATE = config["evaluate"]
# Every trained checkpoint, in training order: the pretraining stages, then SFT and QRPO.
EVALUATE_CHECKPOINTS = PRETRAIN_TRAINED + POSTTRAIN_STAGES
# The chat models, when the instruct suite names tasks (RECIPE §8 "Instruct").
EVALUATE_INSTRUCT = POSTTRAIN_STAGES if EVALUATE["instruct"]["tasks"] else []


# The memorization probes are measured when the data stage planted them (a post-training-only
# run has no data stage).
EVALUATE_MEMORIZATION = config["data"]["probes"]["enabled"] and not POSTTRAIN_ONLY


# No `group:` for a checkpoint's export, evaluation and memorization (one GPU allocation for
# the three): tried with snakemake-executor-plugin-slurm 2.8.0 and -jobstep 0.6.1, the group's
# one `srun` asked for the resources Snakemake recomputes inside the job (layers run side by
# side: 2 CPUs, 2 nodes) and failed "More processors requested than permitted" on the local
# cluster (profiles/slurm-local). Each step is its own SLURM job.
rule export_checkpoint:
    input:
        run=lambda wildcards: evaluate_run_dir(wildcards.stage),
        tokenizer=RUN_TOKENIZER,
        heldout=RUN_HELDOUT,
    output:
        out=directory(stage_path("export", "{stage}")),
        manifest=stage_path("export", "{stage}.manifest.json"),
    log:
        log_path("export", "{stage}"),
    benchmark:
        benchmark_path("export", "{stage}")
    wildcard_constraints:
        stage="|".join(EVALUATE_CHECKPOINTS),
    threads: stage_threads("export")
    resources:
        **stage_job_resources("export"),
    params:
        code=step_code("apertus.export.stage"),
        config=stage_config("export"),
        # SFT and QRPO are chat models: their generation also ends at <|assistant_end|>.
        chat=lambda wildcards: "--chat" if wildcards.stage in POSTTRAIN_STAGES else "",
    shell:
        "OMP_NUM_THREADS={threads} python -m apertus.export.stage --config {params.config:q}"
        " --manifest {output.manifest}"
        " --run {input.run} --tokenizer {input.tokenizer} --heldout {input.heldout}"
        " --output {output.out} {params.chat} > {log} 2>&1"


rule evaluate_tasks:
    input:
        heldout=RUN_HELDOUT,
    output:
        out=directory(stage_path("evaluate", "tasks")),
        manifest=stage_path("evaluate", "tasks.manifest.json"),
    log:
        log_path("evaluate", "tasks"),
    benchmark:
        benchmark_path("evaluate", "tasks")
    threads: 1
    resources:
        # CPU work: no GPU asked for on a cluster.
        **stage_job_resources("default"),
    params:
        code=step_code("apertus.evaluate.stage"),
        config=stage_config("evaluate", "tasks"),
    shell:
        "python -m apertus.evaluate.stage tasks --config {params.config:q}"
        " --manifest {output.manifest} --heldout {input.heldout} --output {output.out}"
        " > {log} 2>&1"


rule evaluate_checkpoint:
    input:
        model=rules.export_checkpoint.output.out,
        tasks=rules.evaluate_tasks.output.out,
    output:
        out=directory(stage_path("evaluate", "lm_eval", "{stage}")),
        manifest=stage_path("evaluate", "lm_eval", "{stage}.manifest.json"),
    log:
        log_path("evaluate", "lm_eval-{stage}"),
    benchmark:
        benchmark_path("evaluate", "lm_eval-{stage}")
    wildcard_constraints:
        stage="|".join(EVALUATE_CHECKPOINTS),
    threads: stage_threads("evaluate")
    resources:
        **stage_job_resources("evaluate"),
    params:
        code=step_code("apertus.evaluate.stage"),
        config=stage_config("evaluate", "suite"),
    shell:
        "OMP_NUM_THREADS={threads} python -m apertus.evaluate.stage run --config {params.config:q}"
        " --manifest {output.manifest} --model {input.model} --tasks {input.tasks}"
        " --output {output.out} > {log} 2>&1"


rule evaluate_instruct:
    input:
        model=rules.export_checkpoint.output.out,
        tasks=rules.evaluate_tasks.output.out,
    output:
        out=directory(stage_path("evaluate", "lm_eval_instruct", "{stage}")),
        manifest=stage_path("evaluate", "lm_eval_instruct", "{stage}.manifest.json"),
    log:
        log_path("evaluate", "lm_eval_instruct-{stage}"),
    benchmark:
        benchmark_path("evaluate", "lm_eval_instruct-{stage}")
    wildcard_constraints:
        stage="|".join(POSTTRAIN_STAGES),
    threads: stage_threads("evaluate")
    resources:
        **stage_job_resources("evaluate"),
    params:
        code=step_code("apertus.evaluate.stage"),
        config=stage_config("evaluate", "instruct"),
    shell:
        "OMP_NUM_THREADS={threads} python -m apertus.evaluate.stage instruct"
        " --config {params.config:q} --manifest {output.manifest} --model {input.model}"
        " --tasks {input.tasks} --output {output.out} > {log} 2>&1"


rule evaluate_memorization:
    input:
        model=rules.export_checkpoint.output.out,
        probes=rules.data_probes.output.out,
        # The pretraining stages up to this checkpoint: exposures are counted in what they
        # read (post-training never sees the probes).
        runs=lambda wildcards: [
            stage_path("pretrain", stage) for stage in pretrain_seen(wildcards.stage)
        ],
        tokenizer=TOKENIZE_TOKENIZER,
        # The Goldfish control is plotted beside its phase, the same run with Goldfish on.
        goldfish=lambda wildcards: (
            [
                stage_path(
                    "evaluate", "memorization", PRETRAIN_CONTROLS[wildcards.stage]
                )
            ]
            if wildcards.stage in PRETRAIN_CONTROLS
            else []
        ),
    output:
        out=directory(stage_path("evaluate", "memorization", "{stage}")),
        manifest=stage_path("evaluate", "memorization", "{stage}.manifest.json"),
    log:
        log_path("evaluate", "memorization-{stage}"),
    benchmark:
        benchmark_path("evaluate", "memorization-{stage}")
    wildcard_constraints:
        stage="|".join(EVALUATE_CHECKPOINTS),
    threads: stage_threads("evaluate")
    resources:
        **stage_job_resources("evaluate"),
    params:
        code=step_code("apertus.evaluate.memorization"),
        config=stage_config("evaluate", "memorization"),
        control=lambda wildcards, input: (
            f"--label no-goldfish --compare goldfish={input.goldfish[0]}/memorization.json"
            if input.goldfish
            else ""
        ),
    shell:
        "OMP_NUM_THREADS={threads} python -m apertus.evaluate.memorization"
        " --config {params.config:q} --manifest {output.manifest} --model {input.model}"
        " --probes {input.probes}/probes.jsonl --runs {input.runs}"
        " --tokenizer {input.tokenizer} --output {output.out} {params.control} > {log} 2>&1"


rule evaluate_table:
    input:
        results=expand(rules.evaluate_checkpoint.output.out, stage=EVALUATE_CHECKPOINTS),
        memorization=(
            expand(rules.evaluate_memorization.output.out, stage=EVALUATE_CHECKPOINTS)
            if EVALUATE_MEMORIZATION
            else []
        ),
        instruct=expand(rules.evaluate_instruct.output.out, stage=EVALUATE_INSTRUCT),
    output:
        out=directory(stage_path("evaluate", "table")),
        manifest=stage_path("evaluate", "table.manifest.json"),
    log:
        log_path("evaluate", "table"),
    benchmark:
        benchmark_path("evaluate", "table")
    # Not a cluster job: one small table across checkpoints.
    localrule: True
    threads: 1
    resources:
        # CPU work: no GPU asked for on a cluster.
        **stage_job_resources("default"),
    params:
        code=step_code("apertus.evaluate.stage"),
        config=stage_config("evaluate", "table"),
        results=lambda wildcards, input: " ".join(
            f"--results {name}={path}"
            for name, path in zip(EVALUATE_CHECKPOINTS, input.results)
        ),
        memorization=lambda wildcards, input: " ".join(
            f"--memorization {name}={path}"
            for name, path in zip(EVALUATE_CHECKPOINTS, input.memorization)
        ),
        instruct=lambda wildcards, input: " ".join(
            f"--instruct {name}={path}"
            for name, path in zip(EVALUATE_INSTRUCT, input.instruct)
        ),
    shell:
        "python -m apertus.evaluate.stage table --config {params.config:q}"
        " --manifest {output.manifest} {params.results} {params.memorization}"
        " {params.instruct} --output {output.out} > {log} 2>&1"


TARGETS.extend(
    [
        *expand(rules.export_checkpoint.output.manifest, stage=EVALUATE_CHECKPOINTS),
        rules.evaluate_table.output.manifest,
    ]
)
