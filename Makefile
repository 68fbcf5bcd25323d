# Two commands: `make demo` and `make test` (and CI's `make check-long`). Each sets up what is missing first.
# prometheus is installed for its promtool (the Grafana dashboard's queries are tested with it),
# openssh-server and sudo for the cluster's namespace machines (each runs its own sshd; Mininet's
# cluster edition calls sudo); Open MPI and libfaketime for `emu run` (mpirun, mpicc; the ranks' fabric time);
# NetPIPE (NPopenmpi), an MPI program the project did not write, for `emu run`'s acceptance test;
# the servers the packages start are not left running unless they
# were there before.
VENV ?= .venv
PY := $(VENV)/bin/python
EMU := $(VENV)/bin/emu
APT_PKGS := mininet bridge-utils iproute2 iputils-ping iperf3 tshark tcpdump python3-venv ethtool chromium prometheus openssh-server openssh-client sudo \
  openmpi-bin libopenmpi-dev netpipe-openmpi libfaketime faketime

.PHONY: setup demo test check-long lint clean p4

setup: $(VENV)/.done

# Set-up runs again when what builds the package or the compiled core changes: an edited .pyx is rebuilt,
# never tested as its old build (emu.dataplane.core also refuses a build older than its source).
$(VENV)/.done: pyproject.toml setup.py $(wildcard emu/*/*.pyx emu/*/*.pxd) emu/net/dilate.c
	@command -v mnexec >/dev/null && command -v iperf3 >/dev/null && command -v tshark >/dev/null && command -v chromium >/dev/null && command -v promtool >/dev/null \
	  && command -v sudo >/dev/null && test -x /usr/sbin/sshd \
	  && command -v mpirun >/dev/null && command -v mpicc >/dev/null && command -v NPopenmpi >/dev/null && command -v faketime >/dev/null \
	  && ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1 \
	  && command -v ping >/dev/null && command -v brctl >/dev/null && /usr/bin/python3 -c 'import venv, mininet' 2>/dev/null \
	  || { had_prometheus=$$(command -v prometheus || true); had_sshd=$$(test -x /usr/sbin/sshd && echo yes || true); \
	       apt-get update -qq \
	       && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(APT_PKGS) \
	       && { ! command -v systemctl >/dev/null \
	            || { [ -n "$$had_prometheus" ] || systemctl disable --now prometheus >/dev/null 2>&1 || true; \
	                 [ -n "$$had_sshd" ] || systemctl disable --now ssh >/dev/null 2>&1 || true; }; }; }
	test -x $(PY) || /usr/bin/python3 -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	# Chakra's trace schema and reader for `emu replay` (its analysis tools' dependencies are not needed)
	$(PY) -m pip install -q 'protobuf>=6.31' && $(PY) -m pip install -q --no-deps 'mlc-chakra==1.0.0'
	touch $@

demo: setup
	$(EMU) clean --quiet
	$(EMU) up fpf --gpus 8 --planes 8 --test pingall
	$(EMU) scenario incast

# The suite in two tiers (docs/testing.md): `make test` runs every test but those marked long (pytest.mark.long:
# the long end-to-end runs on BMv2, over two machines, whole lab checks, benches, MPI jobs), `make check-long`
# runs exactly those. Together they are the whole suite, as `pytest tests` is; CI (.ci/run) runs both.
# EMU_RECORD_FIGURES is for recording figures by hand, never for a check: both unset it.
PYTEST := env -u EMU_RECORD_FIGURES $(PY) -m pytest -q tests

test: setup
	$(EMU) clean --quiet
	$(VENV)/bin/ruff check emu tests topologies labs tools
	$(PYTEST) -m 'not long' --junitxml=results/junit.xml
	$(EMU) clean --quiet

check-long: setup
	$(EMU) clean --quiet
	$(PYTEST) -m long --junitxml=results/junit-long.xml
	$(EMU) clean --quiet

lint: setup
	$(VENV)/bin/ruff check emu tests topologies labs tools

p4:
	@command -v p4c-bm2-ss >/dev/null || { echo "p4c-bm2-ss not found: install p4c (p4lang's packages or a source build) to compile p4/fabric.p4"; exit 2; }
	mkdir -p p4/build
	p4c-bm2-ss --std p4-16 -I p4 -o p4/build/fabric.json p4/fabric.p4

clean:
	-$(EMU) clean
