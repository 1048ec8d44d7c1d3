"""The virtual cluster's object store: Ceph's object gateway (tools/cluster up N
--storage=cephfs --object-gateway).

radosgw (rgw.store1) runs on store1 beside the monitor, on the same OSDs as
CephFS, and speaks S3 in plain HTTP on store1's storage-network address:
every compute host reaches it through its storage link (eth1), the login
side through the storage network's bridge. tools/cluster_cephfs.py writes
its section of ceph.conf and starts it with the other daemons; this file
waits for it to answer, makes the cluster's user and bucket, and says how
a client finds them: the AWS variables every S3 client reads, and an rclone
remote, `gateway:`, made of environment variables alone.

What it is not: one gateway, no TLS, no load balancer in front; the
gateway's pools share the OSDs (and their links) with CephFS.
"""
import os
import secrets
import string
import urllib.error
import urllib.request

import cluster_cephfs as cephfs

USER, BUCKET = "iotest", "iotest"
# radosgw's zonegroup is "default", but it checks no region in a request's
# signature: any region signs. us-east-1 is what an S3 client assumes when
# told none, so a client given only the endpoint signs as one given all.
REGION = "us-east-1"
REMOTE = "GATEWAY"  # rclone's remote `gateway:`, from RCLONE_CONFIG_GATEWAY_*
ANSWER_TIMEOUT_S = 90  # it answers in about 9 s (it makes its pools first)


def endpoint(state):
    return f"http://{cephfs.gateway_address(state)}:{cephfs.GATEWAY_PORT}"


def open_gateway(state, root, ops):
    """Once radosgw runs: wait for it to answer, then its user and bucket."""
    wait_answering(state, root, ops)
    keys = new_keys()
    admin(ops, root, "user", "create", f"--uid={USER}", "--display-name=iotest",
          f"--access-key={keys['access_key']}", f"--secret-key={keys['secret_key']}")
    state["gateway"] = {"endpoint": endpoint(state), "region": REGION, "bucket": BUCKET,
                        "user": USER, **keys}
    # The bucket made through S3 itself, as a client would: the first
    # signed request, so a gateway that refuses the keys fails `up`.
    ops.run("rclone", "mkdir", f"{REMOTE.lower()}:{BUCKET}",
            env=client_env(state, cephfs.env(root)), timeout=60)


def new_keys():
    """A fresh S3 key pair for each cluster, in the shapes AWS uses."""
    alphabet = string.ascii_uppercase + string.digits
    return {"access_key": "".join(secrets.choice(alphabet) for _ in range(20)),
            "secret_key": secrets.token_urlsafe(30)[:40]}


def admin(ops, root, *args, timeout=60):
    """radosgw-admin against the cluster, from the login side."""
    return ops.run("timeout", str(timeout), "radosgw-admin", *args, env=cephfs.env(root),
                   timeout=timeout + 10)


def answers(url):
    """Whether an HTTP server answers at `url`: any status will do."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            answer.read()  # read whole, or radosgw logs a broken pipe
    except urllib.error.HTTPError:
        pass
    except (OSError, ValueError):
        return False
    return True


def wait_answering(state, root, ops):
    try:
        ops.wait_for(f"the object gateway answering at {endpoint(state)}",
                     lambda: answers(endpoint(state)), ANSWER_TIMEOUT_S)
    except ops.Refused as e:
        raise ops.Refused(f"{e}\n{log_tail(root)}") from None


def log_tail(root, lines=15):
    """The last lines of the gateway's log and console, for a failed start."""
    out = []
    for name in (f"ceph-client.{cephfs.GATEWAY}.log", f"ceph-{cephfs.GATEWAY}.console"):
        try:
            with open(os.path.join(root, "log", name), errors="replace") as f:
                tail = f.readlines()[-lines:]
        except OSError:
            continue
        out.append(f"{name}:\n" + "".join(tail).rstrip())
    return "\n".join(out) or "(the gateway wrote no log)"


def client_env(state, env):
    """`env` with what an S3 client needs to reach the gateway: the AWS
    variables (AWS SDKs, boto3, the AWS CLI, rclone with env_auth) and the
    rclone remote `gateway:`. Unchanged without a gateway."""
    g = state.get("gateway")
    if not g:
        return env
    env = dict(env)
    # This machine's AWS_CA_BUNDLE names the system's CA file, which rclone
    # 1.60's AWS SDK fails to load (LoadCustomCABundleError) before any
    # request; the gateway speaks plain HTTP, so no CA is needed.
    env.pop("AWS_CA_BUNDLE", None)
    env.update(s3_variables(g))
    return env


def s3_variables(g):
    remote = f"RCLONE_CONFIG_{REMOTE}"
    return {
        "AWS_ACCESS_KEY_ID": g["access_key"],
        "AWS_SECRET_ACCESS_KEY": g["secret_key"],
        "AWS_ENDPOINT_URL": g["endpoint"],
        "AWS_REGION": g["region"],
        "IOTEST_S3_BUCKET": g["bucket"],
        f"{remote}_TYPE": "s3",
        f"{remote}_PROVIDER": "Ceph",
        f"{remote}_ENV_AUTH": "true",  # the keys from AWS_*
        f"{remote}_ENDPOINT": g["endpoint"],
        f"{remote}_REGION": g["region"],
    }


def exports(state):
    """The lines `tools/cluster env` adds for the gateway."""
    g = state.get("gateway")
    if not g:
        return []
    return ["# The object gateway speaks plain HTTP; this machine's AWS_CA_BUNDLE",
            "# makes rclone 1.60 fail (LoadCustomCABundleError) before any request.",
            "unset AWS_CA_BUNDLE"]


def status_lines(state):
    g = state.get("gateway")
    if not g:
        return []
    up = "answering" if answers(g["endpoint"]) else "NOT ANSWERING"
    return [f"  object gateway {cephfs.GATEWAY} on {cephfs.GATEWAY_HOST}: S3 at {g['endpoint']} "
            f"(plain HTTP), {up}; user {g['user']}, bucket {g['bucket']} "
            f"(rclone: gateway:{g['bucket']})"]
