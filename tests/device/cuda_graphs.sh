#!/bin/sh
# cuda_graphs.sh - npusan.torch on a real GPU: CUDA graphs and streams.
#
# On a machine with an NVIDIA GPU and PyTorch 2 with CUDA: builds npusan
# (Release) in build/device, starts a private npusand, runs each case under
# `npusanctl run` with NPUSAN_TORCH_DEVICE=cuda and checks the kinds of the
# findings (and that the fixed versions are clean). Prints PASS or FAIL per
# case. Not part of the test suite (it needs a GPU).
#
#   sh tests/device/cuda_graphs.sh        (from the checkout; PYTHON=... to
#                                          pick the interpreter)
#
# Exit status: 0 every case passed, 1 a case failed, 2 the build or the
# daemon failed, 77 no GPU or no PyTorch with CUDA here.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
PYTHON=${PYTHON:-python3}
BUILD=$SRC/build/device
WORK=$(mktemp -d "${TMPDIR:-/tmp}/npusan-cuda-graphs.XXXXXX")
trap 'kill "$DAEMON" 2>/dev/null; wait "$DAEMON" 2>/dev/null; rm -rf "$WORK"' EXIT
DAEMON=

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
	echo "cuda_graphs: skipped: no NVIDIA GPU (nvidia-smi)"
	exit 77
fi
if ! "$PYTHON" -c 'import sys, torch
sys.exit(0 if torch.cuda.is_available() and int(torch.__version__.split(".")[0]) >= 2 else 1)' 2>/dev/null; then
	echo "cuda_graphs: skipped: $PYTHON has no PyTorch 2 with CUDA"
	exit 77
fi
"$PYTHON" -c 'import torch; print("cuda_graphs: torch", torch.__version__, "CUDA", torch.version.cuda, "on", torch.cuda.get_device_name(0))'

echo "cuda_graphs: building npusan (Release) in $BUILD"
if ! { cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
		-DPython3_EXECUTABLE="$(command -v "$PYTHON")" &&
	cmake --build "$BUILD" -j "$(nproc)" --target npusan npusand npusanctl \
		npusan-graph-workspace &&
	{ cmake --build "$BUILD" -j "$(nproc)" --target npusan_speedups ||
	  echo "cuda_graphs: npusan._speedups not built: the Python path runs"; }
	} >"$WORK/build.log" 2>&1; then
	tail -30 "$WORK/build.log"
	echo "cuda_graphs: FAIL: the build failed (log above)"
	exit 2
fi
CTL=$BUILD/npusanctl
SOCK=$WORK/npusand.sock
"$BUILD/daemon/npusand" --socket "$SOCK" --db "$WORK/npusan.db" 2>"$WORK/npusand.log" &
DAEMON=$!
i=0
until [ -S "$SOCK" ]; do
	i=$((i + 1))
	if [ $i -gt 500 ] || ! kill -0 "$DAEMON" 2>/dev/null; then
		cat "$WORK/npusand.log"
		echo "cuda_graphs: FAIL: npusand did not start"
		exit 2
	fi
	sleep 0.02
done

# The two-stream race, and eager work racing a replay, on real streams.
cat >"$WORK/streams.py" <<'PY'
import torch

x = torch.full((1 << 20,), 3.0, device="cuda")  # written on the default stream
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    y = x * 2  # read on the side stream, not ordered after the fill
torch.cuda.synchronize()
print("total", y.sum().item())
PY
cat >"$WORK/replay_race.py" <<'PY'
import torch

w = torch.ones(256, 256, device="cuda")
static_x = torch.ones(256, 256, device="cuda")
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    torch.mm(static_x, w)  # warm-up, as torch.cuda.graph's docs do
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = torch.mm(static_x, w)
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    g.replay()  # writes static_y on the side stream
print("total", static_y.sum().item())  # read on the default stream: a race
torch.cuda.synchronize()
PY
cat >"$WORK/graphed.py" <<'PY'
import torch

model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                            torch.nn.Linear(64, 8)).cuda()
x = torch.randn(16, 64, device="cuda", requires_grad=True)
graphed = torch.cuda.make_graphed_callables(model, (x,))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    inp = torch.randn(16, 64, device="cuda", requires_grad=True)
    graphed(inp).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
print("done")
PY

FAILED=0
# check NAME "EXPECTED KINDS" CMD...: runs CMD under npusanctl run; passes
# when the findings' kinds, sorted, are EXPECTED (empty: clean, exit 0).
check() {
	name=$1 expected=$2
	shift 2
	NPUSAN_TORCH_DEVICE=cuda PYTHONPATH="$SRC/agent/python${PYTHONPATH:+:$PYTHONPATH}" \
		"$CTL" run --socket "$SOCK" --job "$name" --json -- "$@" \
		>"$WORK/$name.out" 2>"$WORK/$name.err"
	rc=$?
	got=$("$PYTHON" - "$WORK/$name.out" <<'PY'
import json, sys
kinds = []
for line in open(sys.argv[1]):
    if line.startswith("{"):
        kinds.append(json.loads(line)["kind"])
print(" ".join(sorted(kinds)))
PY
)
	want_rc=1
	[ -z "$expected" ] && want_rc=0
	if [ "$got" = "$expected" ] && [ $rc -eq $want_rc ]; then
		echo "PASS $name: ${got:-clean}"
	else
		echo "FAIL $name: expected '${expected:-clean}' (exit $want_rc), got '${got:-clean}' (exit $rc)"
		sed 's/^/    /' "$WORK/$name.err" | tail -20
		grep '^{' "$WORK/$name.out" | sed 's/^/    /' | head -10
		FAILED=1
	fi
}

check stream_race "data_race" "$PYTHON" -m npusan.torch "$WORK/streams.py"
check replay_race "data_race" "$PYTHON" -m npusan.torch "$WORK/replay_race.py"
check graph_stale "stale_graph_address" "$PYTHON" -m npusan.torch "$SRC/examples/graph_stale.py"
check graph_stale_fixed "" "$PYTHON" -m npusan.torch "$SRC/examples/graph_stale.py" --fixed
# CUDA refuses the unjoined capture (the example says so on stderr).
check graph_branches "data_race unjoined_capture" "$PYTHON" -m npusan.torch "$SRC/examples/graph_branches.py"
check graph_branches_fixed "" "$PYTHON" -m npusan.torch "$SRC/examples/graph_branches.py" --fixed
check graph_workspace "stale_graph_address" "$BUILD/npusan-graph-workspace"
check graph_workspace_fixed "" "$BUILD/npusan-graph-workspace" --fixed
check make_graphed_callables "" "$PYTHON" -m npusan.torch "$WORK/graphed.py"
export NPUSAN_PYTHON_SPEEDUPS=0  # the adapter's Python path
check graph_stale_python_path "stale_graph_address" "$PYTHON" -m npusan.torch "$SRC/examples/graph_stale.py"
check graph_branches_python_path "data_race unjoined_capture" "$PYTHON" -m npusan.torch "$SRC/examples/graph_branches.py"
unset NPUSAN_PYTHON_SPEEDUPS

if [ $FAILED -ne 0 ]; then
	echo "cuda_graphs: FAIL"
	exit 1
fi
echo "cuda_graphs: all cases passed"
exit 0
