#!/usr/bin/env bash
# Prepare a lent GPU session (issue 77), here, before it: what benchmarks/device_run.sh needs there.
#
#   bash benchmarks/device_prepare.sh
#
# 1. .whl/: the wheels pflcore's notebooks need on the lent machine, whose image (KINDS.md of the
#    device tool) has torch, numpy, scipy, pandas, matplotlib, seaborn, pyyaml, tqdm, requests,
#    aiohttp, jinja2, joblib, pytest and hypothesis but not papermill, the Jupyter kernel stack or
#    cvxpy. Each is named below with one version (the versions this project's .venv runs), fetched
#    with pip download --no-deps for CPython 3.12 on manylinux x86-64; every Requires-Dist of every
#    wheel is then checked to be a carried wheel, in the image, or left out below with its reason,
#    and the whole set is installed dry (--target a temporary folder, Python 3.12 tags).
# 2. .device-data/: Fashion-MNIST (the device check, FedPAC's entries) and FedCP's MNIST partition
#    (FedCP Table 2's entries, which the campaign runs first), packed by benchmarks/device_data.py
#    (lossless, md5-checked; the plain copies would not fit in the 64 MiB that travel), and SOURCE
#    (the commit the session runs: the machine gets no .git, so its records say git_commit null).
# 3. The sizes that travel (the tree git would send, .whl, .device-data) against 64 MiB.
#
# Both folders are ignored (.gitignore) and never committed; name them in the device call's carry.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
LIMIT=$((64 * 1024 * 1024))

# name==version: the wheels that travel (one version each). ipykernel, papermill and cvxpy's needs.
WHEELS=(
  papermill==2.7.0 nbformat==5.11.1 nbclient==0.11.0 ipykernel==7.4.0 jupyter_client==8.10.0
  jupyter_core==5.9.1 traitlets==5.16.1 fastjsonschema==2.22.3 jsonschema==4.26.0
  jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 entrypoints==0.4.2
  tenacity==9.2.1 comm==0.2.3 ipython==9.18.1 ipython_pygments_lexers==1.1.1 matplotlib-inline==0.2.2
  nest-asyncio2==1.7.4 pyzmq==27.3.0 tornado==6.6.1 pexpect==4.9.0 ptyprocess==0.7.0
  prompt_toolkit==3.0.53 wcwidth==0.9.4 stack-data==0.6.3 asttokens==3.0.2 executing==2.3.0
  pure_eval==0.2.4 platformdirs==4.14.9
  cvxpy==1.9.3 osqp==1.1.3 clarabel==0.11.1 qdldl==0.1.9.post1 cffi==2.1.1 pycparser==3.12
)
# Named by a carried wheel's metadata but left behind, each with why (54 MB together; 64 MiB travel).
LEFT_OUT='{
 "scs": "cvxpy imports it only to solve with SCS (43 MB); FedPAC solves with CLARABEL",
 "highspy": "cvxpy imports it only to solve with HiGHS (3 MB)",
 "sparsediffpy": "cvxpy imports it only for its NLP solvers (12 MB)",
 "debugpy": "ipykernel imports it only to debug a kernel (4 MB)",
 "jedi": "IPython imports it only for tab completion (5 MB with parso)",
 "appnope": "macOS only"
}'
# pyproject.toml dependencies the runs there do without: pooch (downloads only; the data travel),
# ipywidgets (progress widgets, off in quiet runs; pflcore.engine.progress falls back to text).

echo "device prepare: wheels into .whl/"
rm -rf .whl && mkdir .whl
PLATFORMS=()
for p in manylinux_2_39 manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_26 \
         manylinux_2_24 manylinux_2_17 manylinux2014 manylinux_2_5 manylinux1; do
  PLATFORMS+=(--platform "${p}_x86_64")
done
TAGS=(--only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}")
"$PY" -m pip download -q --no-deps "${TAGS[@]}" -d .whl "${WHEELS[@]}" 2>&1 | grep -v "is ignored" || true
[ "$(ls .whl/*.whl | wc -l)" -eq "${#WHEELS[@]}" ] || { echo "device prepare: pip fetched $(ls .whl | wc -l) of" \
  "${#WHEELS[@]} wheels; see above." >&2; exit 1; }

echo "device prepare: checking every wheel's tags and needs"
"$PY" - "$LEFT_OUT" "${WHEELS[@]}" <<'EOF'
import json, sys, zipfile
from email.parser import Parser
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.tags import Tag, cpython_tags, compatible_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

left_out = {canonicalize_name(k): v for k, v in json.loads(sys.argv[1]).items()}
asked = {canonicalize_name(Requirement(w).name): Version(w.split("==")[1]) for w in sys.argv[2:]}
# The device image's packages (KINDS.md of the device tool, read 2026-11-17): never carried.
IMAGE = set(map(canonicalize_name, """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio
attrs botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings
cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub
humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2
joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch
mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft
pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash
yarl zipp""".split()))
target = {*cpython_tags((3, 12), platforms=[f"{p}_x86_64" for p in ("manylinux_2_39", "manylinux_2_17",
          "manylinux2014", "manylinux_2_28", "manylinux_2_24", "manylinux_2_26", "manylinux_2_27", "manylinux_2_34",
          "manylinux_2_5", "manylinux1", "manylinux_2_31", "manylinux_2_35", "linux")]),
          *compatible_tags((3, 12), "cp312", platforms=["manylinux_2_17_x86_64", "linux_x86_64"])}
env = {**default_environment(), "python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
       "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}
carried, problems = {}, []
for wheel in sorted(Path(".whl").glob("*.whl")):
    name, version, _, tags = parse_wheel_filename(wheel.name)
    if not set(tags) & target:
        problems.append(f"{wheel.name} does not run on CPython 3.12 on x86-64 Linux (tags {sorted(map(str, tags))})")
    if name in carried:
        problems.append(f"two versions of {name}")
    carried[name] = (version, wheel)
if set(carried) != set(asked):
    problems.append(f"fetched {sorted(carried)} but asked for {sorted(asked)}")
for name, (version, wheel) in sorted(carried.items()):
    if asked.get(name) != version:
        problems.append(f"{wheel.name} is not the asked {name}=={asked.get(name)}")
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        needs = Parser().parsestr(z.read(meta).decode()).get_all("Requires-Dist") or []
    for line in needs:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate(env):
            continue  # an extra, another platform or Python
        need = canonicalize_name(req.name)
        if need in carried:
            if not req.specifier.contains(carried[need][0], prereleases=True):
                problems.append(f"{name} needs {req}, but {need} {carried[need][0]} is carried")
        elif need not in IMAGE and need not in left_out:
            problems.append(f"{name} needs {req}, which is neither carried, in the image nor left out with a reason")
for name in left_out:
    if name in carried:
        problems.append(f"{name} is both carried and left out")
if problems:
    sys.exit("device prepare: " + "; ".join(problems) + ".")
print(f"device prepare: {len(carried)} wheels, one version each, every one cp312-x86-64 or pure Python; every need "
      f"carried, in the image or left out ({', '.join(sorted(left_out))})")
EOF

DRY=$(mktemp -d)
trap 'rm -rf "$DRY"' EXIT
"$PY" -m pip install -q --no-index --no-deps --no-compile --target "$DRY" "${TAGS[@]}" .whl/*.whl
echo "device prepare: dry install for CPython 3.12 (pip --target, --no-index): $(ls "$DRY" | grep -c dist-info)" \
     "distributions"

echo "device prepare: data into .device-data/"
rm -rf .device-data && mkdir .device-data
nice -n 19 "$PY" benchmarks/device_data.py pack .device-data ${FEDCP_DATA:+--fedcp "$FEDCP_DATA"}
# the commit and the package's digest: records made there name this commit (pflcore.records.prepared_source)
{ echo "commit $(git rev-parse HEAD)"; echo "dirty $(git status --porcelain --untracked-files=no -- pflcore | wc -l)"
  echo "package $("$PY" -c 'from pflcore.records import package_digest; print(package_digest())')"
  echo "prepared $(date -u +%Y-%m-%dT%H:%M:%SZ)"; } > .device-data/SOURCE

tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null |
       awk '{s += $1} END {print s + 0}')
whl=$(du -sb .whl | cut -f1)
data=$(du -sb .device-data | cut -f1)
total=$((tree + whl + data))
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "device prepare: what travels: tree $(mib "$tree") + .whl $(mib "$whl") + .device-data $(mib "$data")" \
     "= $(mib "$total") of 64 MiB"
if [ "$total" -gt "$LIMIT" ]; then
  echo "device prepare: over the 64 MiB the device tool sends; leave something behind." >&2
  exit 1
fi
echo "device prepare: ready; the call is in docs/speed.md (carry [\".whl\", \".device-data\"])"
