# The controller image: `docker build -t localhost/metal3-ipam:v0.1.0 .`
#
# Two stages. The build stage has two virtual environments: /opt/build holds pip and the
# build backend (requirements-build.lock), /opt/metal3-ipam is made without pip and gets
# the pinned wheels of requirements.lock (no compiler is ever needed: --only-binary) and the
# controller's own wheel, installed into it by the build environment's pip. Only
# /opt/metal3-ipam is copied into the runtime image: no pip, setuptools or wheel there.
# Bytecode is compiled at build time with hashes, not timestamps (SOURCE_DATE_EPOCH), so the
# read-only root filesystem costs no start-up time and the same sources give the same files.
# The controller runs as an unprivileged user; the Deployment in config/manager adds a
# read-only root filesystem and drops every capability.
ARG PYTHON_IMAGE=python:3.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1 SOURCE_DATE_EPOCH=0
RUN python3 -m venv /opt/build && python3 -m venv --without-pip /opt/metal3-ipam
COPY requirements-build.lock requirements.lock /tmp/
RUN /opt/build/bin/python3 -m pip install --no-deps --only-binary=:all: -r /tmp/requirements-build.lock
RUN /opt/build/bin/python3 -m pip --python /opt/metal3-ipam/bin/python3 install --no-deps --only-binary=:all: \
        -r /tmp/requirements.lock
COPY pyproject.toml setup.cfg README.md /src/
COPY metal3_ipam /src/metal3_ipam
RUN /opt/build/bin/python3 -m pip wheel --no-deps --no-build-isolation --no-index -w /tmp/wheels /src \
    && /opt/build/bin/python3 -m pip --python /opt/metal3-ipam/bin/python3 install --no-deps --no-index \
        /tmp/wheels/metal3_ipam-*.whl
# The kubernetes client's asyncio copy (kubernetes.aio, a third of the environment) is never
# imported, nor are the test suites some wheels carry.
RUN cd /opt/metal3-ipam/lib/python3*/site-packages && rm -rf kubernetes/aio websocket/tests

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/metal3-ipam /opt/metal3-ipam
ENV PATH=/opt/metal3-ipam/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# /manager: the command the Go Metal3 IPAM's and the Go in-cluster provider's Deployments run; it is
# `metal3-ipam run` with their defaults, so their manifests run this image with only the image changed.
RUN ln -s /opt/metal3-ipam/bin/metal3-ipam-manager /manager
# 65532: the conventional "nonroot" user of distroless images, as in config/manager.
USER 65532:65532
EXPOSE 8081 8443 9440 9443
ENTRYPOINT ["metal3-ipam"]
CMD ["run", "--all-namespaces"]
