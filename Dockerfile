# The controller image: `docker build -t localhost/metal3-ipam:v0.1.0 .`
#
# Two stages: dependencies are installed from pinned wheels (requirements.lock; no compiler
# is ever needed, --only-binary) into a virtual environment, which alone is copied into a
# clean slim image. The controller runs as an unprivileged user; the Deployment in
# config/manager adds a read-only root filesystem and drops every capability.
ARG PYTHON_IMAGE=python:3.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/metal3-ipam
COPY requirements.lock /tmp/requirements.lock
RUN /opt/metal3-ipam/bin/pip install --only-binary=:all: -r /tmp/requirements.lock
COPY pyproject.toml setup.cfg README.md /src/
COPY metal3_ipam /src/metal3_ipam
RUN /opt/metal3-ipam/bin/pip install --no-deps /src

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/metal3-ipam /opt/metal3-ipam
ENV PATH=/opt/metal3-ipam/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# 65532: the conventional "nonroot" user of distroless images, as in config/manager.
USER 65532:65532
EXPOSE 8081 9443
ENTRYPOINT ["metal3-ipam"]
CMD ["run", "--all-namespaces"]
