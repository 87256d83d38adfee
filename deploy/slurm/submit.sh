#!/usr/bin/env bash
# Submits an evaluation as a Slurm array of SHARDS tasks and the merge after it.
#   MODEL=... DRAFT=... DATASET=... OUT=... SHARDS=8 EVAL_ARGS="-k 3 -n 256" bash deploy/slurm/submit.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
shards=${SHARDS:-8}
array=$(sbatch --parsable --export=ALL --array=0-$((shards - 1)) "$here/eval.sbatch")
sbatch --export=ALL --dependency=afterok:"$array" "$here/merge.sbatch"
