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
INTERPOLATION = re.compile(r"\$\{(\w+)(?::?([-?])([^}]*))?\}")
REQUIRED = "given-in-dot-env"  # what a test reads for `${NAME:?message}`, a variable compose.yaml requires


def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text(encoding="utf-8")


def image_env(name: str) -> str:
    """A variable the image's ENV sets."""
    return re.search(rf"\b{name}=(\S+)", dockerfile()).group(1)


def interpolated(text: str, env: dict[str, str] | None = None) -> str:
    """compose.yaml as Compose reads it, with `${NAME:-default}` replaced (from `env`, else the default) and
    `${NAME:?message}` from `env`, else `REQUIRED`."""
    env = env or {}
    return INTERPOLATION.sub(lambda m: env.get(m[1]) or (REQUIRED if m[2] == "?" else m[3] or ""), text)


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


def health_check(service: dict) -> str:
    """A service's health check command as one line (Compose gives `CMD-SHELL`'s as the string itself)."""
    test = service["healthcheck"]["test"]
    return test if isinstance(test, str) else " ".join(test)


def test_compose_runs_mongodb_as_a_replica_set_it_initiates(compose):
    mongo, parley = compose["services"]["mongo"], compose["services"]["parley"]
    assert mongo["image"].startswith("mongo:")
    replica_set = mongo["command"][mongo["command"].index("--replSet") + 1]
    uri = urlsplit(parley["environment"]["MONGODB_URI"])
    assert uri.hostname == "mongo" and parse_qs(uri.query)["replicaSet"] == [replica_set]
    check = health_check(mongo)
    assert f"rs.initiate({{_id: '{replica_set}'" in check and f"host: 'mongo:{uri.port}'" in check
    assert parley["depends_on"]["mongo"]["condition"] == "service_healthy"


def test_compose_mongodb_requires_a_password_and_parley_presents_it(compose):
    """MongoDB runs with authentication: its root user is made from the environment (no default password: Compose
    refuses to start without one), Parley's URI carries the same credentials, and the replica set's key (which
    mongod requires once authentication is on) is made by a step that completes before MongoDB starts."""
    services = compose["services"]
    mongo, parley = services["mongo"], services["parley"]
    raw = COMPOSE.read_text(encoding="utf-8")
    assert re.search(r"\$\{MONGO_PASSWORD:\?[^}]+\}", raw) and not re.search(r"\$\{MONGO_PASSWORD:?-", raw)
    uri = urlsplit(parley["environment"]["MONGODB_URI"])
    env = mongo["environment"]
    assert (uri.username, uri.password) == (env["MONGO_INITDB_ROOT_USERNAME"], env["MONGO_INITDB_ROOT_PASSWORD"])
    assert uri.password == REQUIRED and parse_qs(uri.query)["authSource"] == ["admin"]
    # The health check that initiates the replica set logs in as that user.
    check = health_check(mongo)
    assert "$$MONGO_INITDB_ROOT_USERNAME" in check and "$$MONGO_INITDB_ROOT_PASSWORD" in check
    # The key file: made into a volume by a one-off step, read by mongod from it.
    key_path = mongo["command"][mongo["command"].index("--keyFile") + 1]
    (keyed,) = [name for name, condition in mongo["depends_on"].items()
                if condition["condition"] == "service_completed_successfully"]
    maker = services[keyed]
    volume = next(v.split(":")[0] for v in mongo["volumes"] if key_path.startswith(v.split(":")[1] + "/"))
    assert any(v.split(":")[0] == volume for v in maker["volumes"]) and volume in compose["volumes"]
    made = " ".join(maker["entrypoint"])
    assert "chmod 400" in made and "chown 999:999" in made and "/dev/urandom" in made


def test_compose_trusts_the_proxy_alone(compose):
    """Forwarded client addresses are believed from the nginx proxy's fixed address only, not from the whole
    network (a replica, or any container on it, could claim any address), and no other container can be given
    that address."""
    import ipaddress

    services = compose["services"]
    trusted = services["parley"]["environment"]["PARLEY_TRUSTED_PROXIES"].split(",")
    proxy_address = services["proxy"]["networks"]["parley"]["ipv4_address"]
    assert trusted == [proxy_address]
    (pool,) = compose["networks"]["parley"]["ipam"]["config"]
    assert ipaddress.ip_address(proxy_address) in ipaddress.ip_network(pool["subnet"])
    assert ipaddress.ip_address(proxy_address) not in ipaddress.ip_network(pool["ip_range"])


def test_compose_names_the_hosts_mcp_answers(compose):
    """/mcp is behind the proxy, which passes the client's Host on: compose.yaml names the hosts it answers (the
    published loopback address by default, the deployment's own names from `.env`)."""
    environment = compose["services"]["parley"]["environment"]
    assert environment["PARLEY_MCP_ALLOWED_HOSTS"].split(",") == ["localhost:*", "127.0.0.1:*"]
    public = interpolated(COMPOSE.read_text(encoding="utf-8"), {"PARLEY_MCP_ALLOWED_HOSTS": "parley.example.com"})
    assert "PARLEY_MCP_ALLOWED_HOSTS: parley.example.com" in public


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
    # Ready on /readyz (this worker and the database: a model endpoint's outage leaves every pod ready); alive on a
    # route that asks neither.
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"]["path"] not in ("/healthz", "/readyz")
    assert route_paths() >= {"/readyz", container["livenessProbe"]["httpGet"]["path"]}
    # Parley never calls the Kubernetes API: no token of it in the pod.
    assert pod["spec"]["automountServiceAccountToken"] is False
    # A stopping pod waits for the Service to drop it, then has time for SIGTERM's hand-over (the engine waits
    # up to 5 s for queued events) before it is killed.
    pause = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert pause > 0 and pod["spec"]["terminationGracePeriodSeconds"] >= pause + 5 + 20


def route_paths() -> set[str]:
    from parley.api.main import create_app

    return set(create_app(Settings()).openapi()["paths"])


def test_a_network_policy_lets_in_the_ingress_alone_and_out_dns_mongodb_and_https():
    kinds = by_kind()
    policy, pod = kinds["NetworkPolicy"], kinds["Deployment"]["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}  # both denied but for the rules below
    # In: the API port alone, from the ingress controller's namespace alone.
    (ingress,) = policy["spec"]["ingress"]
    assert [(p["port"], p["protocol"]) for p in ingress["ports"]] == [("http", "TCP")]
    assert [set(peer) for peer in ingress["from"]] == [{"namespaceSelector"}]
    # Out: DNS (to the cluster's resolver), MongoDB and HTTPS, each on its own port, and nothing else.
    out = {(p["port"], p["protocol"]): rule["to"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert set(out) == {(53, "UDP"), (53, "TCP"), (27017, "TCP"), (443, "TCP")}
    assert all("podSelector" in peer for peer in out[53, "UDP"])
    uri = urlsplit(kinds["Secret"]["stringData"]["MONGODB_URI"])
    assert uri.port in (None, 27017)


def test_the_deployment_reads_its_settings_and_secrets_from_the_manifests():
    kinds = by_kind()
    (container,) = kinds["Deployment"]["spec"]["template"]["spec"]["containers"]
    sources = {next(iter(ref)): ref[next(iter(ref))]["name"] for ref in container["envFrom"]}
    assert sources == {"configMapRef": kinds["ConfigMap"]["metadata"]["name"],
                       "secretRef": kinds["Secret"]["metadata"]["name"]}
    variables = set(kinds["ConfigMap"]["data"]) | set(kinds["Secret"]["stringData"])
    assert variables <= SETTINGS, variables - SETTINGS
    assert {"OPENAI_API_KEY", "MONGODB_URI"} <= set(kinds["Secret"]["stringData"])
    # /mcp answers the names clients use, not loopback alone (DNS rebinding: rebinding_refusal).
    assert kinds["ConfigMap"]["data"]["PARLEY_MCP_ALLOWED_HOSTS"]


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
