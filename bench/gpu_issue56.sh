#!/usr/bin/env bash
# Issue 56's GPU figures in one call, on one H100/H200 in bf16:
#  1. bench/gpu_attention.py: each scorer on sdpa / flex / explicit against torch's SDPA, fwd+bwd,
#     B=16, T=2048 then 512, d=768, 12 heads;
#  2. bench/bert.py --device cuda --preset base: a BERT-base step (T=512) against HF's
#     BertForPreTraining (sdpa): tokens/s ratio and MFU;
#  3. bench/transformer_throughput.py --preset base --compile: mt_transformer_base's training
#     tokens/s, eager and under torch.compile.
#
#   [WHEELS=.whl] bash bench/gpu_issue56.sh OUTDIR [quick]
#
# Time: at most ATT_S + BERT_S + MT_S = 240 + 110 + 120 s (each part is cut there; the attention
# part skips what is left at ATT_S - 80 s and keeps its figures), about 6 minutes on a bare
# machine (flex_attention and torch.compile compile on first use). quick: the same at tiny sizes
# on the CPU, one thread (about 2 minutes). The GPU image lacks omegaconf and antlr4: their wheels
# in WHEELS (`pip wheel --no-deps -w .whl omegaconf==2.3.1 antlr4-python3-runtime==4.9.3`) are
# installed into $WORK/site first. OUTDIR gets summary.txt (versions, each part's exit status and
# table), logs.txt (every part's stderr) and the parts' JSON files.
set -uo pipefail
OUT=${1:?usage: gpu_issue56.sh OUTDIR [quick]}
QUICK=${2:-}
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WORK=${WORK:-/tmp/attnflow-gpu56}
rm -rf "$WORK"; mkdir -p "$WORK/logs" "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=$WORK/inductor  # this run's own compiled kernels
SECONDS=0

WHEELS=${WHEELS:-.whl}
if ! $PY -c "import omegaconf, antlr4" 2>/dev/null && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" "$WHEELS"/*.whl \
    && export PYTHONPATH="$PYTHONPATH:$WORK/site"
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
  git log -1 --format='commit %h %s' 2>/dev/null
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
  $PY -c "
import importlib.util as u
missing = [m for m in ('omegaconf', 'antlr4', 'transformers', 'pytorch_lightning', 'torchmetrics', 'rich') if not u.find_spec(m)]
print('missing:', ', '.join(missing) if missing else 'none')"
} 2>&1 | tee "$OUT/summary.txt"

if [ -n "$QUICK" ]; then
  export OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES=""
  ATT="--tiny --device cpu --repeats 1 --number 1 --warmup 1"
  BERT="--device cpu --preset tiny --repeats 1 --number 1 --warmup 1"
  MT="--preset tiny --device cpu --batch 8 --src-len 12 --tgt-len 12 --repeats 1 --number 1 --compile"
  ATT_S=${ATT_S:-120} BERT_S=${BERT_S:-120} MT_S=${MT_S:-240}
else
  ATT_S=${ATT_S:-240} BERT_S=${BERT_S:-110} MT_S=${MT_S:-120}
  ATT="--device cuda --seq-len 2048 512 --repeats 10 --deadline $((ATT_S - 80))"
  BERT="--device cuda --preset base --repeats 7 --number 3"
  MT="--preset base --device cuda --bf16 --compile --repeats 7 --number 5"
fi

part() {  # part NAME SECONDS JSON script args… — stdout (the table) into the summary, stderr into logs
  local name=$1 limit=$2 json=$3; shift 3
  local t0=$SECONDS
  timeout -k 10 "$limit" $PY "$@" --out "$OUT/$json" >"$WORK/logs/$name.out" 2>"$WORK/logs/$name.err"
  local rc=$?
  { echo; echo "== $name rc=$rc $((SECONDS - t0)) s (124: cut at $limit s)"; cat "$WORK/logs/$name.out"; } | tee -a "$OUT/summary.txt"
}
part attention "$ATT_S" gpu_attention.json bench/gpu_attention.py $ATT
part bert "$BERT_S" bert_step.json bench/bert.py $BERT
part transformer "$MT_S" transformer_throughput.json bench/transformer_throughput.py $MT

for f in "$WORK"/logs/*.err; do echo "== $f"; cat "$f"; done > "$OUT/logs.txt" 2>&1
echo "total $SECONDS s" | tee -a "$OUT/summary.txt"
