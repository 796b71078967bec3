"""The deployment files are valid and fit Parley: compose.yaml against the Compose Specification, the Kubernetes
manifests against the Kubernetes API's schemas (offline, strict), each against what the image and the settings
really are, and docs/deploy.md shows these very files.

Neither can be run here (no image registry is reachable): tests/deploy/test_container.py runs the image itself.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import kubernetes_validate
import pytest
import yaml
from compose_spec import PyCompose

from parley.core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
KUBERNETES = ROOT / "deploy" / "kubernetes"
MANIFESTS = sorted(KUBERNETES.glob("*.yaml"))
DOCS = ROOT / "docs" / "deploy.md"
KUBERNETES_VERSION = "1.30.0"  # the oldest release still supported by the major clouds when this was written
SETTINGS = {name.upper() for name in Settings.model_fields}
INTERPOLATION = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text(encoding="utf-8")


def image_env(name: str) -> str:
    """A variable the image's ENV sets."""
    return re.search(rf"\b{name}=(\S+)", dockerfile()).group(1)


def interpolated(text: str, env: dict[str, str] | None = None) -> str:
    """compose.yaml as Compose reads it, with `${NAME:-default}` replaced (from `env`, else the default)."""
    env = env or {}
    return INTERPOLATION.sub(lambda m: env.get(m[1]) or (m[2] or ""), text)


@pytest.fixture(scope="module")
def compose() -> dict:
    text = interpolated(COMPOSE.read_text(encoding="utf-8"))
    return PyCompose.from_yaml(text).to_dict()  # raises on anything the Compose Specification does not allow


def test_compose_runs_two_replicas_of_the_image_behind_one_port(compose):
    services = compose["services"]
    parley, proxy = services["parley"], services["proxy"]
    assert parley["build"] == "." and parley["deploy"]["replicas"] == 2 and "ports" not in parley
    assert [str(p) for p in proxy["ports"]] and len(proxy["ports"]) == 1
    for service in services.values():
        assert set(service.get("depends_on", {})) <= set(services)
    # The proxy sends to the replicas' port (the image's PARLEY_PORT), by the service's name, without buffering SSE.
    conf_path = next(v.split(":")[0] for v in proxy["volumes"] if v.endswith("nginx/conf.d/default.conf:ro"))
    conf = (ROOT / conf_path).read_text(encoding="utf-8")
    assert f"http://parley:{image_env('PARLEY_PORT')}" in conf and "proxy_buffering off" in conf
    assert re.search(r"listen (\d+);", conf).group(1) == str(proxy["ports"][0]).rsplit(":", 1)[-1]
    # Every variable given to Parley is one of its settings.
    assert set(parley["environment"]) <= SETTINGS, set(parley["environment"]) - SETTINGS


def test_compose_runs_mongodb_as_a_replica_set_it_initiates(compose):
    mongo, parley = compose["services"]["mongo"], compose["services"]["parley"]
    assert mongo["image"].startswith("mongo:")
    replica_set = mongo["command"][mongo["command"].index("--replSet") + 1]
    uri = urlsplit(parley["environment"]["MONGODB_URI"])
    assert uri.hostname == "mongo" and parse_qs(uri.query)["replicaSet"] == [replica_set]
    check = " ".join(mongo["healthcheck"]["test"])
    assert f"rs.initiate({{_id: '{replica_set}'" in check and f"host: 'mongo:{uri.port}'" in check
    assert parley["depends_on"]["mongo"]["condition"] == "service_healthy"


def test_compose_has_a_local_model_server_only_in_its_profile(compose):
    llm = compose["services"]["llm"]
    assert llm["profiles"] == ["local-model"] and "--port" in llm["command"]
    assert all("profiles" not in s for name, s in compose["services"].items() if name != "llm")


def test_compose_rejects_what_the_specification_does_not_allow():
    """The check above can fail: a misspelt key or a bad duration is refused."""
    text = interpolated(COMPOSE.read_text(encoding="utf-8"))
    for broken in (text.replace("replicas: 2", "replicaz: 2"), text.replace("interval: 5s", "interval: 5 parsecs")):
        with pytest.raises(ValueError):
            PyCompose.from_yaml(broken)


def manifests() -> list[tuple[Path, dict]]:
    return [(path, doc) for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_each_kubernetes_manifest_is_valid_for_the_api(path):
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)  # raises, naming the field


def test_a_misspelt_manifest_field_is_refused():
    (_, deployment), = [(p, d) for p, d in manifests() if d["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["readinessProb"] = container.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def by_kind() -> dict[str, dict]:
    found: dict[str, dict] = {}
    for _, doc in manifests():
        assert doc["kind"] not in found, f"two {doc['kind']}s"
        found[doc["kind"]] = doc
    return found


def test_the_deployment_fits_the_image_and_hands_runs_over_when_a_pod_stops():
    kinds = by_kind()
    deployment, service = kinds["Deployment"], kinds["Service"]
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert deployment["spec"]["replicas"] >= 2
    labels = pod["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    assert kinds["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": int(image_env("PARLEY_PORT"))}
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    # The image's user, and nothing written outside the two volumes.
    uid, gid = re.search(r"^USER (\d+):(\d+)$", dockerfile(), re.MULTILINE).groups()
    security = pod["spec"]["securityContext"]
    assert security["runAsNonRoot"] and (security["runAsUser"], security["runAsGroup"]) == (int(uid), int(gid))
    assert container["securityContext"]["readOnlyRootFilesystem"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {image_env("PARLEY_HOME"), "/tmp"}
    # Ready on /healthz (model and database); alive on a route that asks neither.
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["livenessProbe"]["httpGet"]["path"] != "/healthz"
    # A stopping pod waits for the Service to drop it, then has time for SIGTERM's hand-over (the engine waits
    # up to 5 s for queued events) before it is killed.
    pause = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert pause > 0 and pod["spec"]["terminationGracePeriodSeconds"] >= pause + 5 + 20


def test_the_deployment_reads_its_settings_and_secrets_from_the_manifests():
    kinds = by_kind()
    (container,) = kinds["Deployment"]["spec"]["template"]["spec"]["containers"]
    sources = {next(iter(ref)): ref[next(iter(ref))]["name"] for ref in container["envFrom"]}
    assert sources == {"configMapRef": kinds["ConfigMap"]["metadata"]["name"],
                       "secretRef": kinds["Secret"]["metadata"]["name"]}
    variables = set(kinds["ConfigMap"]["data"]) | set(kinds["Secret"]["stringData"])
    assert variables <= SETTINGS, variables - SETTINGS
    assert {"OPENAI_API_KEY", "MONGODB_URI"} <= set(kinds["Secret"]["stringData"])


def test_docs_deploy_shows_the_files_the_tests_check():
    page = DOCS.read_text(encoding="utf-8")
    # compose.yaml, word for word.
    blocks = re.findall(r"^```yaml\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
    assert COMPOSE.read_text(encoding="utf-8") in blocks, "docs/deploy.md's compose.yaml is not the repository's"
    # Each manifest, linked by its path.
    linked = {(DOCS.parent / target).resolve() for target in re.findall(r"\]\(([^)#\s]+)\)", page)}
    assert {path.resolve() for path in MANIFESTS} <= linked, "a manifest of deploy/kubernetes is not linked"
    # Every variable a service is given is explained there.
    services = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
    given = {name for s in services.values() for name in s.get("environment", {})}
    given |= {m[0] for m in INTERPOLATION.findall(COMPOSE.read_text(encoding="utf-8"))}
    missing = sorted(name for name in given if f"`{name}`" not in page)
    assert not missing, f"docs/deploy.md does not explain {missing}"


def test_the_image_sends_only_what_it_installs():
    """.dockerignore is an allow list: every package folder pyproject.toml installs is sent, and nothing else."""
    import tomllib

    folders = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values())
    allowed = {line[1:] for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")}
    assert folders <= allowed, folders - allowed
    assert {".venv", ".git", "tests", "studio"}.isdisjoint(allowed)
    assert os.path.exists(ROOT / "deploy" / "wheelhouse")
