//! The deployment files in `deploy/` cannot drift from the binary: the configuration passes `--check-config`,
//! every flag they pass exists in `--help`, the binary and configuration paths, ports, probe paths and stop
//! timeouts agree across the systemd unit, the container file and the Kubernetes manifests, and
//! `systemd-analyze verify` accepts the unit without a warning. And every TOML example in `docs/` passes
//! `--check-config`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::process::Command;

use moonbridge_proxy::config::ListenerConfig;
use moonbridge_proxy::Config;

const BIN: &str = env!("CARGO_BIN_EXE_moonbridge");
/// Where the unit and the image put the binary and the configuration.
const INSTALLED_BIN: &str = "/usr/local/bin/moonbridge";
const INSTALLED_CONFIG: &str = "/etc/moonbridge/moonbridge.toml";
/// The container file's `HEALTHCHECK` options (Docker's, not the proxy's).
const HEALTHCHECK_OPTIONS: [&str; 4] = ["--interval=", "--timeout=", "--start-period=", "--retries="];

fn deploy(name: &str) -> (PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (path, text)
}

/// The numbers after `key:` on the lines of a YAML file (enough for these flat manifests).
fn yaml_numbers(yaml: &str, key: &str) -> Vec<u64> {
    yaml.lines().filter_map(|l| l.trim().strip_prefix(key)?.strip_prefix(':')?.trim().parse().ok()).collect()
}

fn config() -> Config {
    Config::load(&deploy("moonbridge.toml").0).expect("deploy/moonbridge.toml is valid")
}

#[test]
fn the_shipped_configuration_passes_check_config() {
    let out = Command::new(BIN).arg("--check-config").arg(deploy("moonbridge.toml").0).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c = config();
    assert!(c.metrics.bind.is_some(), "the probes need the metrics listener");
}

/// The Kubernetes configuration is the single one with `[network]` added; `--check-config` reads its secret file
/// (refusing it until the Secret is mounted) and accepts it once it is there.
#[test]
fn the_network_configuration_is_the_shipped_one_with_a_network() {
    let (path, text) = deploy("moonbridge-network.toml");
    // Parsed only: the check needs the secret file, which is there only inside the pod.
    let network = Config::from_toml(&text).expect("deploy/moonbridge-network.toml parses");
    let single = config();
    assert_eq!(network.listeners, single.listeners, "the same listeners");
    assert_eq!((network.backends.len(), network.metrics.bind), (single.backends.len(), single.metrics.bind));
    assert!(single.network.is_none(), "the single instance needs no Redis");
    let n = network.network.as_ref().expect("[network]");
    let out = Command::new(BIN).arg("--check-config").arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("network.secret_file"), "{stderr}");
    // With the secret mounted where the file says: accepted.
    let dir = moonbridge_test_certs::TestDir::new("moonbridge-network-config").unwrap();
    let secret = dir.join("network.key");
    std::fs::write(&secret, "0123456789abcdef0123456789abcdef\n").unwrap();
    let mounted = dir.join("moonbridge.toml");
    std::fs::write(&mounted, text.replace(n.secret_file.to_str().unwrap(), secret.to_str().unwrap())).unwrap();
    let out = Command::new(BIN).arg("--check-config").arg(&mounted).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A secret too short is refused by --check-config as by the start.
    std::fs::write(&secret, "short\n").unwrap();
    let out = Command::new(BIN).arg("--check-config").arg(&mounted).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("holds 5 bytes; the secret needs at least 32"), "{stderr}");
}

/// The configuration for Cloudflare's Full (strict) mode is the shipped one with a `wss` listener; `--check-config`
/// refuses it until its Origin CA certificate files are there and accepts it with a certificate in their place.
#[test]
fn the_origin_configuration_is_the_shipped_one_with_a_wss_listener() {
    let (path, text) = deploy("moonbridge-origin.toml");
    let origin = Config::from_toml(&text).expect("deploy/moonbridge-origin.toml parses");
    let single = config();
    let n = single.listeners.len();
    assert_eq!(origin.listeners.len(), n + 1, "one listener more");
    assert_eq!(origin.listeners.get(..n), Some(&single.listeners[..]), "the shipped listeners first");
    let wss = &origin.listeners[n];
    assert_eq!((wss.transport, wss.bind.port()), (moonbridge_proxy::config::Transport::Wss, 8443));
    assert_eq!((origin.backends.len(), origin.metrics.bind), (single.backends.len(), single.metrics.bind));
    let out = Command::new(BIN).arg("--check-config").arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("tls_cert"), "{stderr}");
    // With a certificate and key where the file names them: accepted.
    let cert = moonbridge_test_certs::TestCert::generate("origin", moonbridge_test_certs::KeyType::Ec).unwrap();
    let placed = text
        .replace("/etc/moonbridge/origin.pem", cert.cert.to_str().unwrap())
        .replace("/etc/moonbridge/origin.key", cert.key.to_str().unwrap());
    let copy = cert.dir.join("moonbridge-origin.toml");
    std::fs::write(&copy, placed).unwrap();
    let out = Command::new(BIN).arg("--check-config").arg(&copy).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn every_flag_in_the_deployment_files_exists() {
    let help = String::from_utf8(Command::new(BIN).arg("--help").output().unwrap().stdout).unwrap();
    for file in ["moonbridge.service", "Containerfile", "kubernetes.yaml"] {
        let (_, text) = deploy(file);
        // Commands that run the proxy (comments hold install commands with their own flags).
        let flags: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .flat_map(|l| {
                l.split(|c: char| c.is_whitespace() || matches!(c, '"' | '[' | ']' | ','))
                    .filter(|w| w.strip_prefix("--").is_some_and(|f| f.starts_with(|c: char| c.is_ascii_alphabetic())))
            })
            .collect();
        assert!(!flags.is_empty() || file == "kubernetes.yaml", "{file} passes flags");
        for f in flags {
            // Build-tool flags in the container file's build stage are cargo's, not ours.
            // So are the HEALTHCHECK's timing options.
            let theirs = ["--release", "--locked", "--bin", "--from=build"];
            if file == "Containerfile" && (theirs.contains(&f) || HEALTHCHECK_OPTIONS.iter().any(|o| f.starts_with(o)))
            {
                continue;
            }
            assert!(help.contains(&format!("{f} ")), "{file}: {f} is not a moonbridge flag:\n{help}");
        }
    }
}

#[test]
fn paths_ports_probes_and_stop_timeouts_agree() {
    let c = config();
    let (_, unit) = deploy("moonbridge.service");
    let (_, image) = deploy("Containerfile");
    let (_, k8s) = deploy("kubernetes.yaml");
    let (_, kustomization) = deploy("kustomization.yaml");
    // The binary and the configuration file, where each file expects them.
    assert!(unit.contains(&format!("ExecStart={INSTALLED_BIN} --config {INSTALLED_CONFIG}")), "{unit}");
    assert!(unit.contains(&format!("ExecStartPre={INSTALLED_BIN} --check-config {INSTALLED_CONFIG}")));
    assert!(image.contains(&format!("/src/target/release/moonbridge {INSTALLED_BIN}")), "{image}");
    assert!(image.contains(&format!("ENTRYPOINT [\"{INSTALLED_BIN}\"]")));
    assert!(image.contains(&format!("CMD [\"--config\", \"{INSTALLED_CONFIG}\"]")));
    assert!(image.contains(&format!("COPY deploy/moonbridge.toml {INSTALLED_CONFIG}")));
    assert!(k8s.contains(&format!("args: [\"--config\", \"{INSTALLED_CONFIG}\"]")), "{k8s}");
    let dir = Path::new(INSTALLED_CONFIG).parent().unwrap().to_str().unwrap();
    assert!(k8s.contains(&format!("mountPath: {dir}")));
    assert!(
        kustomization.contains("- moonbridge.toml=moonbridge-network.toml")
            && kustomization.contains("name: moonbridge-config")
    );
    assert!(k8s.contains("name: moonbridge-config"));

    // Ports: every listener and the metrics listener are exposed by the image and the pod.
    let ports: Vec<u16> =
        c.listeners.iter().map(|l: &ListenerConfig| l.bind.port()).chain(c.metrics.bind.map(|b| b.port())).collect();
    let exposed: Vec<u16> = image
        .lines()
        .find_map(|l| l.strip_prefix("EXPOSE "))
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let container_ports = yaml_numbers(&k8s, "containerPort");
    for p in &ports {
        assert!(exposed.contains(p), "EXPOSE lacks {p}");
        assert!(container_ports.contains(&u64::from(*p)), "containerPort {p} missing");
    }
    // The instance links of the Kubernetes configuration too.
    let network = Config::from_toml(&deploy("moonbridge-network.toml").1).unwrap();
    let peer = network.network.map(|n| n.peer_bind.port()).expect("[network]");
    assert!(exposed.contains(&peer) && container_ports.contains(&u64::from(peer)), "peer_bind {peer}");
    // The probes use the metrics port and the endpoints the proxy serves.
    let metrics_port = c.metrics.bind.unwrap().port();
    assert!(k8s.contains(&format!("name: metrics\n              containerPort: {metrics_port}")), "{k8s}");
    assert!(k8s.contains(&format!("prometheus.io/port: \"{metrics_port}\"")));
    // The image's HEALTHCHECK asks the metrics listener with --probe.
    let probe = format!("CMD [\"{INSTALLED_BIN}\", \"--probe\", \"127.0.0.1:{metrics_port}\"]");
    assert!(image.contains("HEALTHCHECK ") && image.contains(&probe), "{image}");
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        let at = k8s.find(probe).unwrap_or_else(|| panic!("{probe} missing"));
        assert!(k8s[at..].lines().take(4).any(|l| l.trim() == format!("path: {path}")), "{probe} → {path}");
    }

    // The image: a version tag (the workspace's), pulled only when missing; never `latest` (pulled on every start).
    let version = env!("CARGO_PKG_VERSION");
    assert!(k8s.contains(&format!("image: moonbridge:{version}\n")), "the image is tagged {version}: {k8s}");
    assert!(k8s.contains("imagePullPolicy: IfNotPresent") && !k8s.contains(":latest"));
    // The metrics port is reachable only from Prometheus's namespace: its ingress rule names whom it is from.
    let policy = &k8s[k8s.find("kind: NetworkPolicy").expect("a NetworkPolicy")..];
    let rule =
        policy.split("\n    - ").find(|r| r.contains(&format!("- port: {metrics_port}"))).expect("a rule for metrics");
    assert!(rule.starts_with("from:") && rule.contains("namespaceSelector"), "metrics open to everyone: {rule}");

    // Stop: SIGTERM, and longer than the shutdown grace everywhere.
    let grace = c.limits.shutdown_grace_seconds;
    assert!(unit.contains("KillSignal=SIGTERM") && image.contains("STOPSIGNAL SIGTERM"));
    let stop: u64 = unit.lines().find_map(|l| l.strip_prefix("TimeoutStopSec=")).unwrap().parse().unwrap();
    assert!(stop > grace, "TimeoutStopSec {stop} <= shutdown_grace_seconds {grace}");
    let termination = yaml_numbers(&k8s, "terminationGracePeriodSeconds");
    assert!(termination.len() == 1 && termination[0] > grace, "terminationGracePeriodSeconds {termination:?}");
}

#[test]
fn systemd_analyze_verifies_the_unit() {
    // The unit as installed, with the binary and configuration paths pointing at this build.
    let dir = moonbridge_test_certs::TestDir::new("moonbridge-unit").unwrap();
    let config = dir.join("moonbridge.toml");
    std::fs::copy(deploy("moonbridge.toml").0, &config).unwrap();
    let unit =
        deploy("moonbridge.service").1.replace(INSTALLED_BIN, BIN).replace(INSTALLED_CONFIG, config.to_str().unwrap());
    let path = dir.join("moonbridge.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian package systemd) is installed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify: {stderr}");
    // Unknown or misspelt keys are only warnings for systemd: none allowed here.
    assert!(stderr.trim().is_empty(), "systemd-analyze verify warned: {stderr}");
}

/// Every TOML example in `docs/` passes `--check-config`, with the files it names (`tls_cert`, `tls_key`,
/// `secret_file`, `admin_token_file`, …) made in a scratch directory: a certificate and its key, a 64-byte
/// secret. A block that starts with a key rather than a table continues the one before it in the same document
/// (the docs show a listener, then the keys to add to it).
#[test]
fn every_configuration_example_in_the_docs_passes_check_config() {
    let dir = moonbridge_test_certs::TestDir::new("moonbridge-doc-examples").unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    moonbridge_test_certs::self_signed(&cert, &key, "moonbridge.example", false).unwrap();
    let secret = dir.join("secret");
    std::fs::write(&secret, "5".repeat(64)).unwrap();
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    let mut checked = 0;
    let mut names: Vec<PathBuf> = std::fs::read_dir(&docs).unwrap().map(|e| e.unwrap().path()).collect();
    names.sort();
    for doc in names.into_iter().filter(|p| p.extension().is_some_and(|e| e == "md")) {
        let text = std::fs::read_to_string(&doc).unwrap();
        let mut blocks: Vec<String> = Vec::new();
        for block in text.split("```toml\n").skip(1).filter_map(|b| b.split("```").next()) {
            let first = block.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#')).unwrap_or("");
            match blocks.last_mut() {
                Some(last) if !first.starts_with('[') => last.push_str(block),
                _ => blocks.push(block.to_string()),
            }
        }
        for (i, block) in blocks.iter().enumerate() {
            let with_files: String = block
                .lines()
                .map(|line| {
                    let Some((k, v)) = line.split_once(" = \"/") else { return line.to_string() };
                    let file = match k.trim() {
                        "tls_cert" | "redis_ca_file" | "redis_client_cert" => &cert,
                        "tls_key" | "redis_client_key" => &key,
                        _ => &secret,
                    };
                    let rest = v.split_once('"').map_or("", |(_, r)| r);
                    format!("{k} = \"{}\"{rest}", file.display())
                })
                .collect::<Vec<_>>()
                .join("\n");
            let path = dir.join(format!("{}-{i}.toml", doc.file_stem().unwrap().to_string_lossy()));
            std::fs::write(&path, &with_files).unwrap();
            let out = Command::new(BIN).arg("--check-config").arg(&path).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{} example {i}:\n{with_files}\n{err}", doc.display());
            checked += 1;
        }
    }
    assert!(checked >= 10, "{checked} examples");
}
