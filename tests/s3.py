"""A real S3- and STS-compatible server for the tests: moto's server (HTTP on loopback, in a thread of the
test process, so that a test can look at what STS was asked), with IAM authentication on: a request
signed with keys it never issued is refused.

Before authentication is turned on, it is given a user (the server's static keys, allowed everything), a
role that user may assume (what vended credentials are made from) and a bucket.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

REGION = "us-east-1"
BUCKET = "lake"
ALLOW_ALL = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    access_key_id: str
    secret_access_key: str
    role_arn: str

    def client(self, service: str = "s3", **keys: str) -> Any:
        """A boto3 client; with the server's keys unless others are given."""
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=keys.get("access_key_id", self.access_key_id),
            aws_secret_access_key=keys.get("secret_access_key", self.secret_access_key),
            aws_session_token=keys.get("session_token"),
        )

    def keys(self, prefix: str) -> list[str]:
        """The object keys under `prefix` in the bucket."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def session_policies(self) -> list[dict[str, Any]]:
        """The session policies of the roles assumed so far, oldest first (moto's own state)."""
        from moto.sts.models import sts_backends

        account = self.role_arn.split(":")[4]
        roles = sts_backends[account]["aws"].assumed_roles
        return [json.loads(role.policy) for role in roles if role.policy]


def _checking_every_signed_header() -> Any:
    """moto checks a signature by signing the request again with botocore, which never signs User-Agent (nor
    Expect, X-Amzn-Trace-Id); the AWS SDK for Java v1, which Hadoop's S3A uses, does sign it, and S3 checks the
    headers the request's SignedHeaders names, whatever they are. So that moto checks S3A's requests as S3 would,
    its S3 signature check signs again every header the request signed (moto's own code picks them out)."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import HTTPHeaders
    from moto.iam.access_control import S3IAMRequest

    class AsSigned(S3SigV4Auth):  # type: ignore[misc]  # botocore has no type hints
        def headers_to_sign(self, request: Any) -> Any:
            headers = HTTPHeaders()
            for name, value in request.headers.items():
                headers[name.lower()] = value
            return headers

    original = S3IAMRequest._create_auth
    S3IAMRequest._create_auth = lambda self, credentials: AsSigned(credentials, self._service, self._region)  # type: ignore[method-assign]
    return original


@contextmanager
def s3_server() -> Iterator[S3Server]:
    from moto.iam.access_control import S3IAMRequest
    from moto.server import ThreadedMotoServer

    original_check = _checking_every_signed_header()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        import boto3

        def setup(service: str) -> Any:
            return boto3.client(
                service, endpoint_url=endpoint, region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x"
            )

        iam = setup("iam")
        iam.create_user(UserName="lakewarden")
        iam.put_user_policy(UserName="lakewarden", PolicyName="all", PolicyDocument=ALLOW_ALL)
        key = iam.create_access_key(UserName="lakewarden")["AccessKey"]
        trust = {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}
        role = iam.create_role(
            RoleName="tables", AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [trust]})
        )["Role"]
        iam.put_role_policy(RoleName="tables", PolicyName="all", PolicyDocument=ALLOW_ALL)
        setup("s3").create_bucket(Bucket=BUCKET)
        # from here on, every request must be signed with keys moto issued
        httpx.post(f"{endpoint}/moto-api/reset-auth", content=b"0", timeout=10).raise_for_status()
        yield S3Server(endpoint, key["AccessKeyId"], key["SecretAccessKey"], role["Arn"])
    finally:
        httpx.post(f"{endpoint}/moto-api/reset", timeout=10)  # its state is the process's: leave none behind
        httpx.post(f"{endpoint}/moto-api/reset-auth", content=b"inf", timeout=10)
        server.stop()
        S3IAMRequest._create_auth = original_check  # type: ignore[method-assign]
