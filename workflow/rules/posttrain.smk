# Post-training (RECIPE.md §7): the instruction set -> SFT data -> SFT on torchtitan from the
# last pretraining stage (or, with `posttrain.init_from`, from a released checkpoint that
# `posttrain_start` brings into the run) -> QRPO: reference samples from the exported SFT
# model, rewards, quantiles and reference log-probs -> QRPO training -> each policy's answers
# to the held-out prompts, scored -> the reward report (SFT vs aligned).
# The SFT and QRPO models are exported and evaluated by workflow/rules/evaluate.smk.
# Code: apertus/posttrain/. Config: `posttrain:` (config/README.md). Tests: tests/posttrain/.

from apertus.core.config import shipped_path

POSTTRAIN = config["posttrain"]
POSTTRAIN_STAGES = ["sft", "qrpo"] if POSTTRAIN["enabled"] else []
POSTTRAIN_INSTRUCTIONS = stage_path("posttrain", "instructions")
# Where SFT starts (a run.json it reads), and the tokenizer and held-out texts the SFT data, the
# exports and the evaluation tasks read: the run's last pretraining stage and tokenization, or
# the released checkpoint's (`posttrain_start`) in a post-training-only run.
POSTTRAIN_START = stage_path("posttrain", "start")
if POSTTRAIN_ONLY:
    POSTTRAIN_PREVIOUS = POSTTRAIN_START
    RUN_TOKENIZER = stage_path("posttrain", "start_tokenizer")
    RUN_HELDOUT = stage_path("posttrain", "start_heldout")
else:
    POSTTRAIN_PREVIOUS = stage_path("pretrain", PRETRAIN_STAGES[-1])
    RUN_TOKENIZER = TOKENIZE_TOKENIZER
    RUN_HELDOUT = stage_path("tokenize", "heldout")
# Pretraining documents replayed in SFT (posttrain.sft_data.replay): the phase index they come
# from, a tokenization phase (apertus.plan_check, called by common.smk, checks it is one).
POSTTRAIN_REPLAY = POSTTRAIN["sft_data"]["replay"]
POSTTRAIN_REPLAY_PHASE = (
    [stage_path("tokenize", "phases", POSTTRAIN_REPLAY["phase"])]
    if POSTTRAIN_REPLAY["documents"]
    else []
)
# QRPO's prompt shards (posttrain.qrpo_data.shards) and where a killed shard job's finished
# prompts wait for its re-run.
POSTTRAIN_QRPO_SHARDS = [str(k) for k in range(POSTTRAIN["qrpo_data"]["shards"])]
POSTTRAIN_QRPO_WORK = stage_path("posttrain", "_work")
# The judges' files (posttrain.qrpo_data.reward and rewards_by_category: rubrics, e.g. the Swiss
# AI Charter, and prompt templates): inputs of the steps that score, so editing one re-runs
# them. Found as the steps find them (apertus.core.config.shipped_path: the working directory,
# else the checkout).
POSTTRAIN_RUBRICS = sorted(
    {
        str(shipped_path(reward[key]))
        for reward in [
            POSTTRAIN["qrpo_data"]["reward"],
            *POSTTRAIN["qrpo_data"]["rewards_by_category"].values(),
        ]
        for key in ("rubric_file", "template_file")
        if reward[key]
    }
)


rule posttrain_instructions:
    output:
        out=directory(POSTTRAIN_INSTRUCTIONS),
        manifest=stage_path("posttrain", "instructions.manifest.json"),
    log:
        log_path("posttrain", "instructions"),
    benchmark:
        benchmark_path("posttrain", "instructions")
    threads: 1
    resources:
        # CPU work: no GPU asked for on a cluster.
        **stage_job_resources("default"),
    params:
        code=step_code("apertus.posttrain.instructions"),
        config=stage_subconfig("posttrain", "instructions"),
    shell:
        "python -m apertus.posttrain.instructions --config {params.config:q}"
        " --manifest {output.manifest} --output {output.out} > {log} 2>&1"


rule posttrain_start:
    input:
        instructions=POSTTRAIN_INSTRUCTIONS,
    output:
        out=directory(POSTTRAIN_START),
        tokenizer=directory(stage_path("posttrain", "start_tokenizer")),
        heldout=directory(stage_path("posttrain", "start_heldout")),
        manifest=stage_path("posttrain", "start.manifest.json"),
    log:
        log_path("posttrain", "start"),
    benchmark:
        benchmark_path("posttrain", "start")
    threads: 1
    resources:
        # Files fetched and checked: no GPU asked for on a cluster.
        **stage_job_resources("default"),
    params:
        code=step_code("apertus.posttrain.start"),
        config=lambda wildcards: canonical_json(
            {
                "init_from": POSTTRAIN["init_from"],
                "flavor": config["pretrain"]["flavor"],
            }
        ),
    shell:
        "python -m apertus.posttrain.start --config {params.config:q}"
        " --manifest {output.manifest} --instructions {input.instructions}"
        " --output {output.out} --tokenizer {output.tokenizer} --heldout {output.heldout}"
        " > {log} 2>&1"


rule posttrain_sft_data:
    input:
        instructions=POSTTRAIN_INSTRUCTIONS,
        tokenizer=RUN_TOKENIZER,
        replay=POSTTRAIN_REPLAY_PHASE,
    output:
        out=directory(stage_path("posttrain", "sft_data")),
        manifest=stage_path("posttrain", "sft_data.manifest.json"),
    log:
        log_path("posttrain", "sft_data"),
    benchmark:
        benchmark_path("posttrain", "sft_data")
    threads: 1
    resources:
        # CPU work: no GPU asked for on a cluster.
        **stage_job_resources("default"),
    params:
        code=step_code("apertus.posttrain.sft_data"),
        config=stage_subconfig("posttrain", "sft_data"),
        replay=" ".join(f"--replay-phase {path}" for path in POSTTRAIN_REPLAY_PHASE),
    shell:
        "python -m apertus.posttrain.sft_data --config {params.config:q}"
        " --manifest {output.manifest} --conversations {input.instructions}/train.jsonl"
        " --tokenizer {input.tokenizer} --output {output.out}"
        " {params.replay} > {log} 2>&1"


rule posttrain_sft:
    input:
        sft_data=rules.posttrain_sft_data.output.out,
        previous=POSTTRAIN_PREVIOUS,
    output:
        out=directory(stage_path("posttrain", "sft")),
        manifest=stage_path("posttrain", "sft.manifest.json"),
    log:
        log_path("posttrain", "sft"),
    benchmark:
        benchmark_path("posttrain", "sft")
    priority: 10  # the critical path, as pretraining
    threads: stage_threads("posttrain")
    resources:
        **stage_job_resources("posttrain", nodes=POSTTRAIN["sft"]["nnodes"]),
    params:
        code=step_code("apertus.posttrain.sft"),
        config=stage_subconfig("posttrain", "sft"),
        work_root=lambda wildcards, output: os.path.join(
            os.path.dirname(output.out), "_work"
        ),
    shell:
        "python -m apertus.posttrain.sft --config {params.config:q} --manifest {output.manifest}"
        " --sft-data {input.sft_data} --previous {input.previous} --output {output.out}"
        " --work-root {params.work_root} > {log} 2>&1"


# QRPO's data in shards of prompts (posttrain.qrpo_data.shards; a prompt's shard is a hash of its
# id, and its samples do not depend on the number of shards): one sampling job and one scoring
# job per shard, one model at a time on resources.posttrain_sample and posttrain_score (other
# nodes than training's may serve them), then a local merge into qrpo_scored/ (what QRPO
# training reads). A killed shard job re-run keeps the prompts it had
# finished: they wait in _work/, which Snakemake does not clear.
rule posttrain_qrpo_sample:
    input:
        model=stage_path("export", "sft"),
        instructions=POSTTRAIN_INSTRUCTIONS,
    output:
        out=directory(stage_path("posttrain", "qrpo_samples", "shard-{shard}")),
        manifest=stage_path("posttrain", "qrpo_samples", "shard-{shard}.manifest.json"),
    log:
        log_path("posttrain", "qrpo_samples-{shard}"),
    benchmark:
        benchmark_path("posttrain", "qrpo_samples-{shard}")
    wildcard_constraints:
        shard=r"\d+",
    priority: 10  # the critical path, as pretraining
    threads: stage_threads("posttrain_sample")
    resources:
        **stage_job_resources("posttrain_sample"),
    params:
        code=step_code("apertus.posttrain.sampling"),
        config=stage_subconfig("posttrain", "qrpo_data"),
        work_dir=lambda wildcards: os.path.join(
            POSTTRAIN_QRPO_WORK, "qrpo_samples", f"shard-{wildcards.shard}"
        ),
    shell:
        "OMP_NUM_THREADS={threads} python -m apertus.posttrain.sampling sample"
        " --config {params.config:q} --manifest {output.manifest} --model {input.model}"
        " --prompts {input.instructions}/qrpo.jsonl --shard {wildcards.shard}"
        " --work-dir {params.work_dir} --output {output.out} > {log} 2>&1"


rule posttrain_qrpo_score_shard:
    input:
        model=stage_path("export", "sft"),
        samples=rules.posttrain_qrpo_sample.output.out,
        instructions=POSTTRAIN_INSTRUCTIONS,
        rubrics=POSTTRAIN_RUBRICS,
    output:
        out=directory(stage_path("posttrain", "qrpo_scored_shards", "shard-{shard}")),
        manifest=stage_path(
            "posttrain", "qrpo_scored_shards", "shard-{shard}.manifest.json"
        ),
    log:
        log_path("posttrain", "qrpo_scored-{shard}"),
    benchmark:
        benchmark_path("posttrain", "qrpo_scored-{shard}")
    wildcard_constraints:
        shard=r"\d+",
    priority: 10  # the critical path, as pretraining
    threads: stage_threads("posttrain_score")
    resources:
        **stage_job_resources("posttrain_score"),
    params:
        code=step_code("apertus.posttrain.sampling"),
        config=stage_subconfig("posttrain", "qrpo_data"),
        work_dir=lambda wildcards: os.path.join(
            POSTTRAIN_QRPO_WORK, "qrpo_scored", f"shard-{wildcards.shard}"
        ),
    shell:
        "OMP_NUM_THREADS={threads} python -m apertus.posttrain.sampling score"
        " --config {params.config:q} --manifest {output.manifest} --model {input.model}"
        " --samples {input.samples} --prompts {input.instructions}/qrpo.jsonl"
        " --shard {wildcards.shard} --work-dir {params.work_dir} --output {output.out}"
        " > {log} 2>&1"


# The scored shards joined in prompt order: completions.jsonl and rewards.json as one job would
# write them (the rule keeps its name and output, so QRPO training is unchanged).
rule posttrain_qrpo_score:
    input:
        scored=expand(
            stage_path("posttrain", "qrpo_scored_shards", "shard-{shard}"),
            shard=POSTTRAIN_QRPO_SHARDS,
        ),
        instructions=POSTTRAIN_INSTRUCTIONS,
        rubrics=POSTTRAIN_RUBRICS,
    output:
        out=directory(stage_path("posttrain", "qrpo_scored")),
        manifest=stage_path("posttrain", "qrpo_scored.manifest.json"),
    log:
        log_path("posttrain", "qrpo_scored"),
    benchmark:
        benchmark_path("posttrain", "qrpo_scored")
    priority: 10  # the critical path, as pretraining
    # Not a cluster job: files are read and written in order, no model is loaded.
    localrule: True
    threads: 1
    resources:
        # CPU work: no GPU asked for on a cluster.
        **stage_job_resources("default"),
    params:
        code=step_code("apertus.posttrain.sampling"),
        config=stage_subconfig("posttrain", "qrpo_data"),
        scored=lambda wildcards, input: " ".join(f"--scored {d}" for d in input.scored),
    shell:
        "python -m apertus.posttrain.sampling merge --config {params.config:q}"
        " --manifest {output.manifest} --prompts {input.instructions}/qrpo.jsonl"
        " {params.scored} --output {output.out} > {log} 2>&1"


# QRPO on the torchtitan trainer of SFT (posttrain.qrpo.nproc processes, FSDP): resumable from
# its last checkpoint in _work/, as SFT; the completions become a QRPO data directory there.
rule posttrain_qrpo:
    input:
        sft=rules.posttrain_sft.output.out,
        scored=rules.posttrain_qrpo_score.output.out,
    output:
        out=directory(stage_path("posttrain", "qrpo")),
        manifest=stage_path("posttrain", "qrpo.manifest.json"),
    log:
        log_path("posttrain", "qrpo"),
    benchmark:
        benchmark_path("posttrain", "qrpo")
    priority: 10  # the critical path, as pretraining
    threads: stage_threads("posttrain")
    resources:
        **stage_job_resources("posttrain", nodes=POSTTRAIN["qrpo"]["nnodes"]),
    params:
        code=step_code("apertus.posttrain.qrpo_train"),
        config=stage_subconfig("posttrain", "qrpo"),
        work_dir=lambda wildcards, output: os.path.join(
            os.path.dirname(output.out), "_work"
        ),
    shell:
        "OMP_NUM_THREADS={threads} python -m apertus.posttrain.qrpo_train"
        " --config {params.config:q} --manifest {output.manifest} --sft-run {input.sft}"
        " --completions {input.scored}/completions.jsonl --output {output.out}"
        " --work-dir {params.work_dir} > {log} 2>&1"


# One job per policy (sft, qrpo): greedy answers and n samples per held-out prompt from its
# export, scored with the QRPO rewards (each prompt by its category's), with the fraction that
# ended their turn. Evaluation work: one model on the evaluation resources, behind the training
# jobs' priority.
rule posttrain_heldout:
    input:
        model=stage_path("export", "{policy}"),
        instructions=POSTTRAIN_INSTRUCTIONS,
        rubrics=POSTTRAIN_RUBRICS,
    output:
        out=directory(stage_path("posttrain", "heldout", "{policy}")),
        manifest=stage_path("posttrain", "heldout", "{policy}.manifest.json"),
    log:
        log_path("posttrain", "heldout-{policy}"),
    benchmark:
        benchmark_path("posttrain", "heldout-{policy}")
    wildcard_constraints:
        policy="|".join(POSTTRAIN_STAGES),
    threads: stage_threads("evaluate")
    resources:
        **stage_job_resources("evaluate"),
    params:
        code=step_code("apertus.posttrain.sampling"),
        config=stage_subconfig("posttrain", "qrpo_data"),
    shell:
        "OMP_NUM_THREADS={threads} python -m apertus.posttrain.sampling heldout"
        " --config {params.config:q} --manifest {output.manifest} --model {input.model}"
        " --prompts {input.instructions}/heldout.jsonl --output {output.out} > {log} 2>&1"


# The policies side by side (SFT the baseline) from their heldout results: no model is loaded.
rule posttrain_report:
    input:
        sft=stage_path("posttrain", "heldout", "sft"),
        qrpo=stage_path("posttrain", "heldout", "qrpo"),
    output:
        json=stage_path("posttrain", "reward_report.json"),
        markdown=stage_path("posttrain", "reward_report.md"),
        manifest=stage_path("posttrain", "reward_report.manifest.json"),
    log:
        log_path("posttrain", "reward_report"),
    benchmark:
        benchmark_path("posttrain", "reward_report")
    # Not a cluster job: a small summary of the reward runs.
    localrule: True
    threads: 1
    resources:
        # CPU work: no GPU asked for on a cluster.
        **stage_job_resources("default"),
    params:
        code=step_code("apertus.posttrain.sampling"),
        config=stage_subconfig("posttrain", "qrpo_data"),
    shell:
        "python -m apertus.posttrain.sampling report --config {params.config:q}"
        " --manifest {output.manifest} --policy sft={input.sft} --policy qrpo={input.qrpo}"
        " --output {output.json} --markdown {output.markdown} > {log} 2>&1"


if POSTTRAIN["enabled"]:

    TARGETS.append(rules.posttrain_report.output.manifest)
