#!/usr/bin/env bash
# attnflow on one CUDA GPU, in one call (not a test: CI has no GPU).
#
#   ATTNFLOW_DATA_DIR=<data> [ENDE=1] [DEADLINE=s] bash bench/gpu_check.sh OUTDIR [quick]
#
# 1. Every model family trains a few steps with trainer=gpu (bf16-mixed) and is tested: the
#    default (RNNsearch on reversal), the reversal Transformer with relative positions, Luong on
#    Multi30k, the Multi30k Transformer, GAT with P-reg on Cora, HAN on IMDB, BERT pretraining on
#    IMDB, Show-Attend-Tell on the shapes set; also the en→de preset's own path for three short
#    epochs (warmup-stable-decay, word dropout, the best 3 averaged and tested with beam 5),
#    callbacks.ema beside bf16-mixed, and float32 with TF32 (float32_matmul_precision=high);
#    logging to TensorBoard (so the dashboards are drawn at every validation, from the GPU's
#    tensors). A family passes when its run writes metrics.json.
# 2. bench/attention_ops.py --device cuda, in float32 and under bf16 autocast: attnflow's multi-head
#    attention against torch.nn.MultiheadAttention (numbers checked, then timed), and the names of
#    the attention kernels each launches.
# 3. With ENDE=1, beside them (started first): en→de runs of experiment=mt_transformer_3h_ende on the
#    GPU for a fixed number of steps: as many as its 3-hour box of one CPU thread allows (14,100 at
#    batch 64, 31 epochs as in the box), the same with batch 32 (29,500 steps: B32's pace), and twice
#    the box. Three at once on one H200 ran 17–22 s an epoch (batch 64), 31–40 s (batch 32): they
#    need about 20 minutes, more than one device call (docs/benchmarks.md, "On a GPU").
# 4. The command-line tools with --device on those runs: attnflow-translate (beam search, alone and
#    as an ensemble of two checkpoints; Luong's attention picture), attnflow-eval, attnflow-predict
#    (HAN's explanation, GAT's neighbours, BERT's fill-mask).
# 5. PART=since runs this instead of 1-4: what changed after the second check (code 41ac4a3,
#    2026-11-26) and had not run on a GPU — fused optimisers (clipped by the task under bf16-mixed,
#    unfused under 16-mixed with clipping), precision auto, the devices a machine lacks — as the
#    tests' CUDA cases (tests/test_precision.py, test_precision_choice.py, blocks/test_dropout.py,
#    test_dashboards.py; on CI they skip) and as command-line runs (the en→de preset's path,
#    16-mixed, GAT, refusals), beside the whole suite on the GPU machine (SUITE_TIMEOUT seconds).
#    For the whole suite the project must be installed there with its entry points (the tests
#    run attnflow-train as a console script): `pip install --no-deps --no-build-isolation -e .`,
#    with the carried wheels installed into the same Python (sweep extras: optuna<3 and its
#    needs, hydra's joblib and submitit launchers). On an H200 (2026-11-27) it took 114 s at -n 14.
# "quick" shrinks everything to a few steps (a dry run of the script on a CPU, trainer=cpu).
# The project need not be installed there: the checkout goes first on PYTHONPATH (hydra-core,
# omegaconf, antlr4-python3-runtime and jiwer are what a GPU image with PyTorch usually lacks).
# Time: on an H100 machine every process spends ≈ 15 s starting (imports), so the families and the
# tools take ≈ 8 minutes without ENDE (docs/benchmarks.md, "On a GPU"); DEADLINE counts from this
# script's start, so give one that ends inside the device call together with anything run before it.
# OUTDIR receives few files (a device machine sends back eight at most): summary.txt, metrics.txt
# (every run's metrics.json) and logs.tar.gz (every log, metrics.json and metrics.csv, the two
# attention JSON files). DEADLINE=<seconds> packs what is there at that time, should the call be
# cut short.
set -uo pipefail
OUT=${1:?usage: gpu_check.sh OUTDIR [quick]}
QUICK=${2:-}
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # bench/*.py import attnflow from the checkout
PY=${PYTHON:-python3}
WORK=${WORK:-/tmp/attnflow-gpu-check}
RUNS=$WORK/runs LOGS=$WORK/logs
rm -rf "$WORK"; mkdir -p "$RUNS" "$LOGS" "$OUT"
export PYTHONUNBUFFERED=1 ATTNFLOW_OUTPUT_DIR=$RUNS
if [ -n "$QUICK" ]; then
  TR="trainer=cpu trainer.precision=32-true"; BOX=6; B32=12; TWICE=12; SMOKE=3; GAT=3
  LIMIT="trainer.limit_val_batches=2 trainer.limit_test_batches=2 data.max_pairs=300"
else
  TR="trainer=gpu"; BOX=14100; B32=29500; TWICE=28200; SMOKE=60; GAT=200; LIMIT=""
fi
SECONDS=0
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
  $PY -c "import torch, pytorch_lightning as pl; print('torch', torch.__version__, 'lightning', pl.__version__, 'cuda', torch.cuda.is_available())"
} 2>&1 | tee "$OUT/summary.txt"

pack() {  # every log and each run's figures into $OUT
  ( cd "$WORK" && find . \( -name '*.log' -o -name '*.json' -o -name '*.csv' \) -print0 \
      | tar --null -czf "$OUT/logs.tar.gz" -T - )
  for f in "$RUNS"/*/metrics.json; do echo "== $f"; cat "$f"; echo; done > "$OUT/metrics.txt" 2>&1
}
WATCH=""
if [ -n "${DEADLINE:-}" ]; then
  ( sleep "$DEADLINE"; echo "deadline: packed at $DEADLINE s" >> "$OUT/summary.txt"; pack ) & WATCH=$!
fi

step() {  # step NAME command… — its output in $LOGS/NAME.log, "NAME rc=… s" in the summary
  local name=$1; shift
  local t0=$SECONDS
  "$@" >"$LOGS/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
}
train() {  # train NAME overrides… — one run in $RUNS/NAME
  local name=$1; shift
  step "$name" $PY -m attnflow.cli.train hydra.run.dir="$RUNS/$name" callbacks.progress_bar=text logger=tensorboard "$@"
}

cli() {  # cli NAME module args…
  local name=$1 module=$2; shift 2
  step "$name" $PY -m "attnflow.$module" "$@"
}
expect_refusal() {  # expect_refusal NAME TEXT command… — passes when it exits 2 saying TEXT
  local name=$1 text=$2; shift 2
  local t0=$SECONDS
  "$@" >"$LOGS/$name.log" 2>&1; local rc=$?
  local ok=no; [ $rc = 2 ] && grep -qF -- "$text" "$LOGS/$name.log" && ok=yes
  echo "$name rc=$rc refused-as-expected=$ok $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
}

if [ "${PART:-all}" = since ]; then
  DEV=cuda; [ -n "$QUICK" ] && DEV=cpu
  # the whole suite, in the background: which tests a machine with a GPU fails
  timeout "${SUITE_TIMEOUT:-300}" $PY -m pytest -v -p no:cacheprovider -n "${SUITE_WORKERS:-8}" \
      --dist loadscope -rfs >"$LOGS/pytest_all.log" 2>&1 &
  SUITE=$!
  step pytest_cuda $PY -m pytest -q -p no:cacheprovider -rs tests/test_precision.py \
      tests/test_precision_choice.py tests/blocks/test_dropout.py tests/test_dashboards.py
  train since_mt_ende experiment=mt_transformer_3h_ende $TR trainer.max_time=null trainer.max_epochs=3 trainer.limit_train_batches=$SMOKE data.max_pairs=2000 trainer.limit_val_batches=4 trainer.limit_test_batches=4
  train since_fp16 experiment=mt_transformer $TR trainer.precision=16-mixed trainer.max_steps=$SMOKE trainer.max_epochs=1 data.max_pairs=2000 trainer.limit_val_batches=4 trainer.limit_test_batches=4
  train since_gat experiment=gat_cora_preg $TR trainer.max_epochs=$GAT
  cli since_translate translate "$RUNS/since_mt_ende" --device $DEV "A man rides a bike."
  expect_refusal since_two_gpus "this machine shows" $PY -m attnflow.cli.train trainer=gpu trainer.devices=$(( $($PY -c 'import torch; print(torch.cuda.device_count())') + 1 ))
  expect_refusal since_eval_gpu1 "--device cuda:" $PY -m attnflow.cli.evaluate "$RUNS/since_gat" --device cuda:$($PY -c 'import torch; print(torch.cuda.device_count())')
  wait $SUITE; echo "pytest_all rc=$? (124: cut at SUITE_TIMEOUT)" | tee -a "$OUT/summary.txt"
  cp "$LOGS/pytest_all.log" "$LOGS/pytest_cuda.log" "$OUT/" 2>/dev/null
  [ -n "$WATCH" ] && kill "$WATCH" 2>/dev/null
  echo "total $SECONDS s" | tee -a "$OUT/summary.txt"
  pack
  exit 0
fi

# 3. the long en→de runs, in the background (each its own process on the one GPU)
LONG=()
if [ -n "${ENDE:-}" ]; then
  MT="experiment=mt_transformer_3h_ende $TR callbacks.attention_maps.every_n_epochs=1000 trainer.max_epochs=1000 trainer.max_time=null"
  train ende_box $MT trainer.max_steps=$BOX $LIMIT & LONG+=($!)
  train ende_b32 $MT trainer.max_steps=$B32 data.batch_size=32 $LIMIT & LONG+=($!)
  train ende_twice $MT trainer.max_steps=$TWICE $LIMIT & LONG+=($!)
fi

# 1. every family, a few steps each, one after another
train smoke_default $TR trainer.max_steps=$SMOKE trainer.max_epochs=1
train smoke_reverse_transformer experiment=reverse_transformer positional=relative $TR trainer.max_steps=$SMOKE trainer.max_epochs=1
# float32 with TF32 tensor cores: Lightning's "has Tensor Cores … set_float32_matmul_precision"
# warning should be absent from its log
train smoke_tf32 experiment=reverse_transformer $TR trainer.precision=32-true float32_matmul_precision=high trainer.max_steps=$SMOKE trainer.max_epochs=1
train smoke_luong experiment=mt_luong $TR trainer.max_steps=$SMOKE trainer.max_epochs=1 data.max_pairs=2000 trainer.limit_val_batches=4 trainer.limit_test_batches=4
train smoke_mt_transformer experiment=mt_transformer $TR trainer.max_steps=$SMOKE trainer.max_epochs=1 data.max_pairs=2000 trainer.limit_val_batches=4 trainer.limit_test_batches=4
# the en→de preset's own path on the GPU: warmup-stable-decay, word dropout, label smoothing 0.2,
# the best 3 of three validated epochs averaged (checkpoints/averaged.ckpt) and tested with beam 5
train smoke_mt_avg experiment=mt_transformer_3h_ende $TR trainer.max_time=null trainer.max_epochs=3 trainer.limit_train_batches=$SMOKE data.max_pairs=2000 trainer.limit_val_batches=4 trainer.limit_test_batches=4
# an exponential moving average of the weights, kept on the GPU beside the bf16-mixed training
train smoke_ema experiment=reverse_transformer $TR "callbacks.ema={decay: 0.99}" trainer.max_steps=$SMOKE trainer.max_epochs=1
train smoke_gat experiment=gat_cora_preg $TR trainer.max_epochs=$GAT
train smoke_han experiment=han_imdb $TR trainer.max_steps=$SMOKE trainer.max_epochs=1 trainer.limit_val_batches=4
train smoke_bert experiment=bert_pretrain_imdb $TR trainer.max_steps=$SMOKE trainer.max_epochs=1 trainer.limit_val_batches=4
train smoke_caption experiment=caption_shapes $TR trainer.max_steps=$SMOKE trainer.max_epochs=1 data.train_size=500 data.val_size=64 data.test_size=64

DEV=cuda; [ -n "$QUICK" ] && DEV=cpu
# 4. the command-line tools on the GPU, on the runs above: each writes to $LOGS/<name>.log
cli cli_translate translate "$RUNS/smoke_mt_transformer" --device $DEV --beam 4 "A man rides a bike." "Two dogs play in the snow."
cli cli_translate_ensemble translate "$RUNS/smoke_mt_transformer" --ensemble "$RUNS/smoke_mt_transformer/checkpoints/last.ckpt" --device $DEV --beam 4 "A man rides a bike."
cli cli_translate_avg translate "$RUNS/smoke_mt_avg" --ensemble "$RUNS/smoke_mt_avg/checkpoints/last.ckpt" --device $DEV "A man rides a bike."
cli cli_translate_luong translate "$RUNS/smoke_luong" --device $DEV --attention "$WORK/luong.png" "A man rides a bike."
cli cli_eval evaluate "$RUNS/smoke_luong" --device $DEV split=test -o "$LOGS/cli_eval.json"
cli cli_predict_han predict "$RUNS/smoke_han" --device $DEV --explain "$WORK/han.html" "A fine film. I loved every minute of it."
cli cli_predict_gat predict "$RUNS/smoke_gat" --device $DEV --explain --top-k 3 -o "$LOGS/cli_gat_nodes.csv"
cli cli_predict_bert predict "$RUNS/smoke_bert" --device $DEV --top-k 3 "The film was [MASK] ."

# 2. the attention kernels
for prec in fp32 bf16; do
  flag=""; [ $prec = bf16 ] && flag=--bf16
  step attention_ops_$prec $PY bench/attention_ops.py --device $DEV $flag --repeats 5 --out "$LOGS/attention_ops_$prec.json"
done

[ ${#LONG[@]} -gt 0 ] && wait "${LONG[@]}"
[ -n "$WATCH" ] && kill "$WATCH" 2>/dev/null
echo "total $SECONDS s" | tee -a "$OUT/summary.txt"
pack
