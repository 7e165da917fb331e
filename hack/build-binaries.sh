#!/usr/bin/env bash
# Build the control-plane binaries the end-to-end tests run on loopback:
#   etcd, kube-apiserver, kube-controller-manager and clusterctl;
# kustomize, which renders config/ (metal3-ipam release, the install and
# image tests); helm, which lints, renders and installs charts/metal3-ipam; and
# prometheus and promtool, which scrape the controller, evaluate the alert rules
# and answer the dashboards' queries (tests/e2e/controller/test_observability.py).
#
# Everything is built from Go modules (the Go module proxy is the only network
# access needed) into a cache outside the repository:
#   ${METAL3_IPAM_BIN_DIR:-~/.cache/metal3-ipam/bin/<k8s-version>}/
# The generated build modules live in <bin-dir>/.build/.
#
# If KUBEBUILDER_ASSETS names a directory that already holds one of the
# binaries, that binary is used as is and not built.
#
# Idempotent: a binary whose version stamp (<bin-dir>/.stamps/<name>) matches is
# skipped. Exit status is non-zero when any binary could not be built; the
# failing ones are named on stderr.
#
# Environment knobs (all optional):
#   METAL3_IPAM_K8S_VERSION         kubernetes release   (default v1.35.4)
#   METAL3_IPAM_ETCD_VERSION        etcd release         (default: the one kubernetes requires)
#   METAL3_IPAM_CLUSTERCTL_VERSION  cluster-api release  (default v1.13.6)
#   METAL3_IPAM_KUSTOMIZE_VERSION   kustomize release    (default v5.8.2)
#   METAL3_IPAM_HELM_VERSION        helm release         (default v3.22.0)
#   METAL3_IPAM_PROMETHEUS_VERSION  prometheus module    (default v0.316.0, Prometheus 3.16.0)
#   METAL3_IPAM_BIN_DIR             output directory
#   METAL3_IPAM_BUILD_ONLY          space-separated subset of: etcd kube-apiserver kube-controller-manager
#                                   clusterctl kustomize helm prometheus promtool
set -euo pipefail

# The whole script is one compound command, parsed before anything runs, so that
# editing or updating this file during a (long) build cannot derail the build.
{

K8S_VERSION="${METAL3_IPAM_K8S_VERSION:-v1.35.4}"
CLUSTERCTL_VERSION="${METAL3_IPAM_CLUSTERCTL_VERSION:-v1.13.6}"
KUSTOMIZE_VERSION="${METAL3_IPAM_KUSTOMIZE_VERSION:-v5.8.2}"
HELM_VERSION="${METAL3_IPAM_HELM_VERSION:-v3.22.0}"
PROMETHEUS_VERSION="${METAL3_IPAM_PROMETHEUS_VERSION:-v0.316.0}"
BIN_DIR="${METAL3_IPAM_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/metal3-ipam/bin/${K8S_VERSION}}"
BUILD_DIR="${BIN_DIR}/.build"
STAMP_DIR="${BIN_DIR}/.stamps"
ALL_BINARIES="etcd kube-apiserver kube-controller-manager clusterctl kustomize helm prometheus promtool"
WANTED="${METAL3_IPAM_BUILD_ONLY:-$ALL_BINARIES}"

# Static binaries, no VCS stamping (the build modules are not repositories),
# and never switch toolchains behind our back.
export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-buildvcs=false"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

log() { printf '[build-binaries] %s\n' "$*"; }
err() { printf '[build-binaries] ERROR: %s\n' "$*" >&2; }

mkdir -p "$BIN_DIR" "$BUILD_DIR" "$STAMP_DIR"

# One build at a time per cache directory (tests and CI may both ask).
if command -v flock >/dev/null 2>&1; then
    exec 9>"${BIN_DIR}/.lock"
    if ! flock -n 9; then
        log "another build holds ${BIN_DIR}/.lock; waiting for it"
        flock 9
    fi
fi

# have_go NAME -> 0 when the go command is available; else records NAME as failed.
have_go() {
    command -v go >/dev/null 2>&1 && return 0
    err "$1: the 'go' command is not on PATH; cannot build it"
    FAILED+=("$1")
    return 1
}

wanted() { case " $WANTED " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

now() { date +%s; }

human_size() { du -h "$1" | cut -f1; }

# up_to_date NAME STAMP -> 0 when BIN_DIR/NAME exists and its stamp matches
up_to_date() {
    [[ -x "${BIN_DIR}/$1" && -f "${STAMP_DIR}/$1" && "$(cat "${STAMP_DIR}/$1")" == "$2" ]]
}

# from_assets NAME -> 0 when KUBEBUILDER_ASSETS provides NAME
from_assets() {
    [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "${KUBEBUILDER_ASSETS}/$1" ]]
}

FAILED=()
SUMMARY=()

# cached NAME STAMP -> 0 when NAME is not to be built: KUBEBUILDER_ASSETS has it, or its stamp matches
cached() {
    if from_assets "$1"; then
        log "$1: using ${KUBEBUILDER_ASSETS}/$1 (KUBEBUILDER_ASSETS)"
        return 0
    fi
    if up_to_date "$1" "$2"; then
        log "$1: up to date ($2) in $BIN_DIR"
        SUMMARY+=("$1 cached $(human_size "$BIN_DIR/$1")")
        return 0
    fi
    return 1
}

# tools_go DIR PACKAGE... -> DIR/tools.go, which pins the commands PACKAGE... in the generated module
tools_go() {
    local dir="$1"; shift
    if (( $# == 1 )); then
        printf '//go:build tools\n\n// Package tools pins the command this module builds.\npackage tools\n\nimport _ "%s"\n' \
            "$1" >"$dir/tools.go"
        return
    fi
    {
        printf '//go:build tools\n\n// Package tools pins the commands this module builds.\npackage tools\n\nimport (\n'
        printf '\t_ "%s"\n' "$@"
        printf ')\n'
    } >"$dir/tools.go"
}

# installed NAME STAMP T0 -> puts the fresh build (BIN_DIR/.NAME.tmp) in place and stamps it
installed() {
    mv -f "$BIN_DIR/.$1.tmp" "$BIN_DIR/$1"
    echo "$2" >"$STAMP_DIR/$1"
    local secs=$(( $(now) - $3 ))
    log "$1: built in ${secs}s, $(human_size "$BIN_DIR/$1")"
    SUMMARY+=("$1 built ${secs}s $(human_size "$BIN_DIR/$1")")
}

# Pull a file out of the module cache (downloading if needed) and print its path.
# mod_field MODULE@VERSION FIELD
mod_field() {
    go mod download -json "$1" | python3 -c '
import json, sys
info = json.load(sys.stdin)
if info.get("Error"):
    sys.exit("go mod download: " + info["Error"])
print(info[sys.argv[1]])
' "$2"
}

# ---------------------------------------------------------------- kubernetes
# Parses k8s.io/kubernetes' go.mod: prints one staging module path per line
# (those replaced with ./staging/src/...).
staging_modules() {
    python3 - "$1" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
mods = set()
for m in re.finditer(r'^\s*(?:replace\s+)?(\S+)(?:\s+v\S+)?\s*=>\s*\./staging/src/(\S+)\s*$', text, re.M):
    mods.add(m.group(1))
print("\n".join(sorted(mods)))
EOF
}

# Prints the version k8s.io/kubernetes' go.mod requires for MODULE.
required_version() {
    python3 - "$1" "$2" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r'^\s*(?:require\s+)?' + re.escape(sys.argv[2]) + r'\s+(v\S+)', text, re.M)
if not m:
    sys.exit("no requirement on " + sys.argv[2])
print(m.group(1))
EOF
}

KUBE_GOMOD=""
kube_gomod() {
    if [[ -z "$KUBE_GOMOD" ]]; then
        KUBE_GOMOD="$(mod_field "k8s.io/kubernetes@${K8S_VERSION}" GoMod)" || return 1
    fi
    printf '%s\n' "$KUBE_GOMOD"
}

# Writes the generated module for the kubernetes binaries and tidies it.
prepare_kubernetes_module() {
    local dir="${BUILD_DIR}/kubernetes-${K8S_VERSION}"
    local gomod staging_version goline godebug
    gomod="$(kube_gomod)" || return 1
    staging_version="v0${K8S_VERSION#v1}"   # v1.35.4 -> v0.35.4
    goline="$(grep -m1 -E '^go [0-9]' "$gomod")"
    godebug="$(grep -E '^godebug ' "$gomod" || true)"
    mkdir -p "$dir"
    if [[ -f "$dir/.ready" && "$(cat "$dir/.ready")" == "$K8S_VERSION" ]]; then
        printf '%s\n' "$dir"
        return 0
    fi
    {
        echo "// Generated by hack/build-binaries.sh; builds kube-apiserver and kube-controller-manager."
        echo "module metal3-ipam.local/kubernetes-binaries"
        echo
        echo "$goline"
        # The main module's godebug settings are the ones the binaries run with;
        # carry over kubernetes' own so the binaries behave like upstream builds.
        [[ -n "$godebug" ]] && { echo; echo "$godebug"; }
        echo
        echo "require k8s.io/kubernetes ${K8S_VERSION}"
        echo
        echo "replace ("
        staging_modules "$gomod" | while read -r m; do
            [[ -n "$m" ]] && printf '\t%s => %s %s\n' "$m" "$m" "$staging_version"
        done
        echo ")"
    } >"$dir/go.mod" || return 1
    tools_go "$dir" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
    log "resolving k8s.io/kubernetes ${K8S_VERSION} ($(staging_modules "$gomod" | wc -l) staging modules replaced with ${staging_version})" >&2
    (cd "$dir" && go mod tidy) >&2 || return 1
    echo "$K8S_VERSION" >"$dir/.ready"
    printf '%s\n' "$dir"
}

kube_ldflags() {
    local v="$K8S_VERSION" major minor
    major="${v#v}"; major="${major%%.*}"
    minor="${v#v*.}"; minor="${minor%%.*}"
    local date; date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    local flags="-s -w"
    local pkg
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        flags+=" -X ${pkg}.gitVersion=${v}"
        flags+=" -X ${pkg}.gitMajor=${major}"
        flags+=" -X ${pkg}.gitMinor=${minor}"
        flags+=" -X ${pkg}.gitTreeState=clean"
        flags+=" -X ${pkg}.buildDate=${date}"
    done
    printf '%s' "$flags"
}

build_kube_binary() {
    local name="$1" stamp="k8s.io/kubernetes@${K8S_VERSION}"
    if from_assets "$name"; then
        log "$name: using ${KUBEBUILDER_ASSETS}/$name (KUBEBUILDER_ASSETS)"
        return 0
    fi
    if up_to_date "$name" "$stamp"; then
        log "$name: up to date ($stamp) in $BIN_DIR"
        SUMMARY+=("$name cached $(human_size "$BIN_DIR/$name")")
        return 0
    fi
    local t0 dir; t0="$(now)"
    have_go "$name" || return 0
    log "$name: building from $stamp (this takes minutes on a cold cache)"
    if ! dir="$(prepare_kubernetes_module)"; then
        err "$name: could not prepare the build module for k8s.io/kubernetes@${K8S_VERSION}"
        FAILED+=("$name"); return 0
    fi
    if ! (cd "$dir" && go build -trimpath -ldflags "$(kube_ldflags)" -o "$BIN_DIR/.$name.tmp" "k8s.io/kubernetes/cmd/$name"); then
        rm -f "$BIN_DIR/.$name.tmp"
        err "$name: go build of k8s.io/kubernetes/cmd/$name@${K8S_VERSION} failed"
        FAILED+=("$name"); return 0
    fi
    installed "$name" "$stamp" "$t0"
}

# ---------------------------------------------------------------------- etcd
build_etcd() {
    local name=etcd version kgomod
    if from_assets "$name"; then
        log "$name: using ${KUBEBUILDER_ASSETS}/$name (KUBEBUILDER_ASSETS)"
        return 0
    fi
    if [[ -z "${METAL3_IPAM_ETCD_VERSION:-}" ]] && ! command -v go >/dev/null 2>&1 \
        && [[ -x "${BIN_DIR}/$name" && "$(cat "${STAMP_DIR}/$name" 2>/dev/null)" == go.etcd.io/etcd/server/v3@* ]]; then
        log "$name: present ($(cat "${STAMP_DIR}/$name")); no go on PATH to check the wanted version"
        SUMMARY+=("$name cached $(human_size "$BIN_DIR/$name")")
        return 0
    fi
    have_go "$name" || return 0
    if [[ -n "${METAL3_IPAM_ETCD_VERSION:-}" ]]; then
        version="$METAL3_IPAM_ETCD_VERSION"
    elif ! kgomod="$(kube_gomod)" || ! version="$(required_version "$kgomod" go.etcd.io/etcd/server/v3)"; then
        err "$name: cannot tell which etcd k8s.io/kubernetes@${K8S_VERSION} uses"
        FAILED+=("$name"); return 0
    fi
    local stamp="go.etcd.io/etcd/server/v3@${version}"
    if up_to_date "$name" "$stamp"; then
        log "$name: up to date ($stamp) in $BIN_DIR"
        SUMMARY+=("$name cached $(human_size "$BIN_DIR/$name")")
        return 0
    fi
    local t0 dir="${BUILD_DIR}/etcd-${version}"; t0="$(now)"
    log "$name: building from $stamp"
    mkdir -p "$dir"
    # The server module's root package is etcd's own `main` (a wrapper around
    # etcdmain.Main); built as a dependency its replace directives do not apply.
    cat >"$dir/go.mod" <<EOF
// Generated by hack/build-binaries.sh; builds etcd.
module metal3-ipam.local/etcd-binary

go 1.24

require go.etcd.io/etcd/server/v3 ${version}
EOF
    tools_go "$dir" go.etcd.io/etcd/server/v3
    if ! (cd "$dir" && go mod tidy && go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/.$name.tmp" go.etcd.io/etcd/server/v3); then
        rm -f "$BIN_DIR/.$name.tmp"
        err "$name: go build of go.etcd.io/etcd/server/v3@${version} failed"
        FAILED+=("$name"); return 0
    fi
    installed "$name" "$stamp" "$t0"
}

# ---------------------------------------------------------------- clusterctl
build_clusterctl() {
    local name=clusterctl version="$CLUSTERCTL_VERSION"
    local stamp="sigs.k8s.io/cluster-api@${version}"
    cached "$name" "$stamp" && return 0
    have_go "$name" || return 0
    local t0 dir="${BUILD_DIR}/cluster-api-${version}" gomod goline; t0="$(now)"
    log "$name: building from $stamp"
    mkdir -p "$dir"
    # A generated module (not `go install pkg@version`) so that releases whose
    # go.mod carries replace directives build the same way.
    if ! gomod="$(mod_field "sigs.k8s.io/cluster-api@${version}" GoMod)"; then
        err "$name: sigs.k8s.io/cluster-api@${version} is not available from the module proxy"
        FAILED+=("$name"); return 0
    fi
    goline="$(grep -m1 -E '^go [0-9]' "$gomod")"
    {
        echo "// Generated by hack/build-binaries.sh; builds clusterctl."
        echo "module metal3-ipam.local/clusterctl-binary"
        echo
        echo "$goline"
        echo
        echo "require sigs.k8s.io/cluster-api ${version}"
        # Submodules replaced with ./<dir> upstream are published at the same version.
        python3 - "$gomod" "$version" <<'EOF'
import re, sys
text, version = open(sys.argv[1]).read(), sys.argv[2]
mods = sorted({m.group(1) for m in re.finditer(r'^\s*(?:replace\s+)?(\S+)(?:\s+v\S+)?\s*=>\s*\./\S+\s*$', text, re.M)})
if mods:
    print("\nreplace (")
    for m in mods:
        print(f"\t{m} => {m} {version}")
    print(")")
EOF
    } >"$dir/go.mod"
    tools_go "$dir" sigs.k8s.io/cluster-api/cmd/clusterctl
    local date; date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    local ver="${version#v}" major minor
    major="${ver%%.*}"; minor="${ver#*.}"; minor="${minor%%.*}"
    local ldflags="-s -w"
    ldflags+=" -X sigs.k8s.io/cluster-api/version.gitVersion=${version}"
    ldflags+=" -X sigs.k8s.io/cluster-api/version.gitMajor=${major}"
    ldflags+=" -X sigs.k8s.io/cluster-api/version.gitMinor=${minor}"
    ldflags+=" -X sigs.k8s.io/cluster-api/version.gitTreeState=clean"
    ldflags+=" -X sigs.k8s.io/cluster-api/version.buildDate=${date}"
    if ! (cd "$dir" && go mod tidy && go build -trimpath -ldflags "$ldflags" -o "$BIN_DIR/.$name.tmp" sigs.k8s.io/cluster-api/cmd/clusterctl); then
        rm -f "$BIN_DIR/.$name.tmp"
        err "$name: go build of sigs.k8s.io/cluster-api/cmd/clusterctl@${version} failed"
        FAILED+=("$name"); return 0
    fi
    installed "$name" "$stamp" "$t0"
}

# ----------------------------------------------------------------- kustomize
build_kustomize() {
    local name=kustomize version="$KUSTOMIZE_VERSION"
    local stamp="sigs.k8s.io/kustomize/kustomize/v5@${version}"
    cached "$name" "$stamp" && return 0
    have_go "$name" || return 0
    local t0 dir="${BUILD_DIR}/kustomize-${version}" gomod goline; t0="$(now)"
    log "$name: building from $stamp"
    mkdir -p "$dir"
    if ! gomod="$(mod_field "$stamp" GoMod)"; then
        err "$name: $stamp is not available from the module proxy"
        FAILED+=("$name"); return 0
    fi
    goline="$(grep -m1 -E '^go [0-9]' "$gomod")"
    cat >"$dir/go.mod" <<EOF
// Generated by hack/build-binaries.sh; builds kustomize.
module metal3-ipam.local/kustomize-binary

${goline}

require sigs.k8s.io/kustomize/kustomize/v5 ${version}
EOF
    tools_go "$dir" sigs.k8s.io/kustomize/kustomize/v5
    # `kustomize version` names the release it was built from.
    local ldflags="-s -w -X sigs.k8s.io/kustomize/api/provenance.version=${version}"
    ldflags+=" -X sigs.k8s.io/kustomize/api/provenance.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    if ! (cd "$dir" && go mod tidy && go build -trimpath -ldflags "$ldflags" -o "$BIN_DIR/.$name.tmp" sigs.k8s.io/kustomize/kustomize/v5); then
        rm -f "$BIN_DIR/.$name.tmp"
        err "$name: go build of $stamp failed"
        FAILED+=("$name"); return 0
    fi
    installed "$name" "$stamp" "$t0"
}

# ---------------------------------------------------------------------- helm
build_helm() {
    local name=helm version="$HELM_VERSION"
    # The stamp names the ldflags too: a build without the Kubernetes version below would be replaced.
    local stamp="helm.sh/helm/v3@${version} +k8sversion"
    cached "$name" "$stamp" && return 0
    have_go "$name" || return 0
    local t0 dir="${BUILD_DIR}/helm-${version}" gomod goline clientgo; t0="$(now)"
    log "$name: building from helm.sh/helm/v3@${version}"
    mkdir -p "$dir"
    if ! gomod="$(mod_field "helm.sh/helm/v3@${version}" GoMod)"; then
        err "$name: helm.sh/helm/v3@${version} is not available from the module proxy"
        FAILED+=("$name"); return 0
    fi
    goline="$(grep -m1 -E '^go [0-9]' "$gomod")"
    cat >"$dir/go.mod" <<EOF
// Generated by hack/build-binaries.sh; builds helm.
module metal3-ipam.local/helm-binary

${goline}

require helm.sh/helm/v3 ${version}
EOF
    tools_go "$dir" helm.sh/helm/v3/cmd/helm
    # `helm version` names the release it was built from; as helm's Makefile does, the Kubernetes version
    # `helm template` and `helm lint` assume (Capabilities.KubeVersion) is that of the client-go it is
    # built with (v0.37.x -> 1.37): without it they assume 1.20 and refuse a chart's kubeVersion.
    if ! clientgo="$(required_version "$gomod" k8s.io/client-go)"; then
        err "$name: cannot tell which k8s.io/client-go helm.sh/helm/v3@${version} uses"
        FAILED+=("$name"); return 0
    fi
    clientgo="${clientgo#v}"
    local k8s_major=$(( ${clientgo%%.*} + 1 )) k8s_minor
    k8s_minor="${clientgo#*.}"; k8s_minor="${k8s_minor%%.*}"
    local ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${version}"
    ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
    local pkg
    for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
        ldflags+=" -X ${pkg}.k8sVersionMajor=${k8s_major} -X ${pkg}.k8sVersionMinor=${k8s_minor}"
    done
    if ! (cd "$dir" && go mod tidy && go build -trimpath -ldflags "$ldflags" -o "$BIN_DIR/.$name.tmp" helm.sh/helm/v3/cmd/helm); then
        rm -f "$BIN_DIR/.$name.tmp"
        err "$name: go build of helm.sh/helm/v3@${version} failed"
        FAILED+=("$name"); return 0
    fi
    installed "$name" "$stamp" "$t0"
}

# ---------------------------------------------------------------- prometheus
# prometheus and promtool, from one generated module. Prometheus 3 tags its Go module v0.3MM.P for its
# release 3.MM.P. Built without the service-discovery plugins (the remove_all_sd tag: the tests scrape
# static targets), which halves the build.
build_prometheus_binary() {
    local name="$1" version="$PROMETHEUS_VERSION"
    local stamp="github.com/prometheus/prometheus/cmd/${name}@${version} remove_all_sd"
    cached "$name" "$stamp" && return 0
    have_go "$name" || return 0
    local t0 dir="${BUILD_DIR}/prometheus-${version}" gomod goline; t0="$(now)"
    log "$name: building from github.com/prometheus/prometheus@${version}"
    mkdir -p "$dir"
    if ! gomod="$(mod_field "github.com/prometheus/prometheus@${version}" GoMod)"; then
        err "$name: github.com/prometheus/prometheus@${version} is not available from the module proxy"
        FAILED+=("$name"); return 0
    fi
    goline="$(grep -m1 -E '^go [0-9]' "$gomod")"
    cat >"$dir/go.mod" <<EOF
// Generated by hack/build-binaries.sh; builds prometheus and promtool.
module metal3-ipam.local/prometheus-binaries

${goline}

require github.com/prometheus/prometheus ${version}
EOF
    tools_go "$dir" github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
    local minor patch ldflags
    minor="${version#v0.}"; patch="${minor#*.}"; minor="${minor%%.*}"
    ldflags="-s -w -X github.com/prometheus/common/version.Version=3.$(( minor - 300 )).${patch}"
    ldflags+=" -X github.com/prometheus/common/version.Branch=release"
    if ! (cd "$dir" && go mod tidy && go build -trimpath -tags remove_all_sd -ldflags "$ldflags" \
            -o "$BIN_DIR/.$name.tmp" "github.com/prometheus/prometheus/cmd/${name}"); then
        rm -f "$BIN_DIR/.$name.tmp"
        err "$name: go build of github.com/prometheus/prometheus/cmd/${name}@${version} failed"
        FAILED+=("$name"); return 0
    fi
    installed "$name" "$stamp" "$t0"
}

# ---------------------------------------------------------------------- main
T_START="$(now)"
log "output: $BIN_DIR ($(command -v go >/dev/null 2>&1 && go version | cut -d' ' -f3- || echo 'no go on PATH'), kubernetes ${K8S_VERSION}, clusterctl ${CLUSTERCTL_VERSION}, kustomize ${KUSTOMIZE_VERSION}, helm ${HELM_VERSION}, prometheus ${PROMETHEUS_VERSION})"
for b in $WANTED; do
    case "$b" in
        etcd) build_etcd ;;
        kube-apiserver | kube-controller-manager) build_kube_binary "$b" ;;
        clusterctl) build_clusterctl ;;
        kustomize) build_kustomize ;;
        helm) build_helm ;;
        prometheus | promtool) build_prometheus_binary "$b" ;;
        *) err "unknown binary '$b' (known: $ALL_BINARIES)"; FAILED+=("$b") ;;
    esac
done
T_TOTAL=$(( $(now) - T_START ))
for line in "${SUMMARY[@]+"${SUMMARY[@]}"}"; do log "  $line"; done
if (( ${#FAILED[@]} )); then
    err "failed to build: ${FAILED[*]} (after ${T_TOTAL}s); see the go output above"
    exit 1
fi
log "done in ${T_TOTAL}s"
exit 0
}
