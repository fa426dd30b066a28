"""The AWS settings a user of boto3 or the AWS CLI has already made, read for the one S3 connection of the
window store, the inputs and the outputs (pipeline.storage): the environment first, then the profile in
~/.aws/credentials and ~/.aws/config, in botocore's order, with configparser (no boto3 needed). Pure: files and variables only,
no network. The endpoint is checked here, so a malformed one is a message, never a panic in the client.

What obstore reads itself from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
AWS_REGION, AWS_DEFAULT_REGION, AWS_ENDPOINT_URL, role variables) is read here too and given to it
explicitly, so both agree; what it does not read (AWS_PROFILE and the two files, AWS_ENDPOINT_URL_S3,
AWS_CA_BUNDLE, AWS_IGNORE_CONFIGURED_ENDPOINT_URLS) is filled in here.
"""
from __future__ import annotations

import configparser
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from .errors import ConfigError

KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
ROLE_VARIABLES = ("AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                  "AWS_CONTAINER_CREDENTIALS_FULL_URI")   # role credentials obstore fetches itself
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")   # the first set wins, as in botocore
# Profile keys that get credentials by running or asking something: not done here (see _profile_credentials)
INDIRECT = {"role_arn": "assuming a role (role_arn)", "sso_start_url": "AWS IAM Identity Center (sso_*)",
            "sso_session": "AWS IAM Identity Center (sso_session)", "credential_process": "a credential_process",
            "web_identity_token_file": "a web identity token (web_identity_token_file)"}
_HOST = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9._~%-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])$")


@dataclass(frozen=True)
class AwsSettings:
    """Where requests go and with which credentials. Secrets are left out of ``repr``.

    ``endpoint`` is None for AWS S3 itself; each ``*_from`` says where a value was set, for messages
    ("AWS_ENDPOINT_URL", "profile 'dev' in /home/u/.aws/config"); "" where it was not set.
    """

    endpoint: str | None = None          # "http(s)://host[:port][/path]", scheme lower-case, no trailing /
    endpoint_from: str = ""
    region: str | None = None
    key_id: str | None = None
    secret: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    credentials_from: str = ""           # "" with role variables only (obstore fetches those) or none at all
    ca_bundle: str | None = None         # a PEM file of the certificates to trust (AWS_CA_BUNDLE, ca_bundle)
    ca_from: str = ""
    profile: str | None = None           # the profile read, when one was found
    ignore_endpoints: bool = False       # AWS_IGNORE_CONFIGURED_ENDPOINT_URLS: AWS S3 whatever is set

    def where(self) -> str:
        """For messages: the endpoint, else "AWS S3 (REGION)". Example: "http://127.0.0.1:9000"."""
        return self.endpoint or f"AWS S3 ({self.region or 'us-east-1'})"

    def obstore_config(self) -> dict[str, str]:
        """obstore's S3Store ``config`` keys for these settings (only those set; an explicit key wins over
        what obstore would read from the environment). Example: {"endpoint": "http://h:9000", "region": "eu-west-1"}."""
        config = {"endpoint": self.endpoint, "region": self.region, "access_key_id": self.key_id,
                  "secret_access_key": self.secret, "token": self.token}
        if self.ignore_endpoints:   # the environment's AWS_ENDPOINT_URL, which obstore reads, must not count
            config["endpoint"] = f"https://s3.{self.region or 'us-east-1'}.amazonaws.com"
        return {k: v for k, v in config.items() if v}

    def redact(self, text: str) -> str:
        """``text`` with the secret key and the session token replaced by "***". Example: "k=abc" -> "k=***"."""
        for secret in (self.secret, self.token):
            if secret:
                text = text.replace(secret, "***")
        return text


def check_endpoint(value: str, name: str) -> str:
    """An endpoint URL as S3 clients need it: ``http://`` or ``https://`` (any case) and a host.

    Args:
        value: the URL as set. name: where it was set, for the message ("AWS_ENDPOINT_URL").

    Returns:
        The URL with its scheme lower-cased and no trailing "/". Example: "HTTP://h:9000/" -> "http://h:9000".

    Raises:
        ConfigError: no scheme (e.g. "localhost:9000"), another scheme, no or a malformed host or port.
    """
    text = value.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise ConfigError(f"{name}={value!r} has no scheme (http:// or https://); write it in full, e.g. "
                          f"{name}=http://{text} for a server without TLS, or {name}=https://{text}")
    if scheme.lower() not in ("http", "https"):
        raise ConfigError(f"{name}={value!r}: the scheme {scheme + '://'!r} is not http:// or https://; "
                          f"e.g. {name}=http://{rest}")
    authority = rest.split("/", 1)[0]
    host, port = authority, ""
    if ":" in authority and not authority.endswith("]"):   # host:port ([v6] alone has colons, no port)
        host, _, port = authority.rpartition(":")
    if not _HOST.match(host) or (":" in authority[len(host):] and not (port.isdigit() and 0 < int(port) < 65536)):
        raise ConfigError(f"{name}={value!r} names no valid host[:port] after {scheme + '://'!r}; "
                          f"e.g. {name}={scheme.lower()}://localhost:9000")
    return f"{scheme.lower()}://{rest}".rstrip("/")


def read_settings(environ: Mapping[str, str] | None = None) -> AwsSettings:
    """The S3 settings from ``environ`` (default os.environ) and the AWS CLI's two files.

    Order (botocore's): credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (with AWS_SESSION_TOKEN),
    else the profile (AWS_PROFILE, else "default") in AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials), then
    in AWS_CONFIG_FILE (~/.aws/config); the region from AWS_REGION, AWS_DEFAULT_REGION, the profile's
    ``region``; the endpoint from AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's ``services`` s3
    ``endpoint_url``, its ``endpoint_url`` (none with AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true); the CA
    bundle from AWS_CA_BUNDLE, the profile's ``ca_bundle``.

    Raises:
        ConfigError: an endpoint without a scheme or host (check_endpoint); AWS_PROFILE naming a profile
            neither file holds; a profile whose credentials come from a role, SSO or a process (run by
            the AWS CLI, not here); a CA bundle that is not a file; a file that is not an INI file.
    """
    env = os.environ if environ is None else environ
    named = env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE")
    profile = named or "default"
    creds_file = _path(env.get("AWS_SHARED_CREDENTIALS_FILE") or "~/.aws/credentials")
    config_file = _path(env.get("AWS_CONFIG_FILE") or "~/.aws/config")
    from_creds = _section(creds_file, profile)
    config_section = profile if profile == "default" and not _has(config_file, "profile default") else f"profile {profile}"
    from_config = _section(config_file, config_section)
    if named and from_creds is None and from_config is None:
        raise ConfigError(f"AWS_PROFILE={named!r}: no profile [{named}] in {creds_file} and no [profile {named}] "
                          f"in {config_file}; profiles there: {', '.join(_profiles(creds_file, config_file)) or 'none'}; "
                          "set AWS_PROFILE to one of them, or unset it")
    where_creds = f"profile {profile!r} in {creds_file}"
    where_config = f"profile {profile!r} in {config_file}"
    merged = {**(from_config or {}), **(from_creds or {})}   # the credentials file wins for keys in both

    key_id, secret, token, creds_from = _credentials(env, from_creds, from_config, where_creds, where_config, profile)
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or (from_config or {}).get("region") or None
    ignore = (env.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS") or (from_config or {}).get(
        "ignore_configured_endpoint_urls", "")).strip().lower() == "true"
    endpoint, endpoint_from = None, ""
    if not ignore:
        for variable in ENDPOINT_VARIABLES:
            if env.get(variable):
                endpoint, endpoint_from = check_endpoint(env[variable], variable), variable
                break
        else:
            found = _services_s3_endpoint(config_file, from_config or {}) or (from_config or {}).get("endpoint_url")
            if found:
                endpoint_from = f"endpoint_url of {where_config}"
                endpoint = check_endpoint(found, endpoint_from)
    ca, ca_from = env.get("AWS_CA_BUNDLE"), "AWS_CA_BUNDLE"
    if not ca and merged.get("ca_bundle"):
        ca, ca_from = merged["ca_bundle"], f"ca_bundle of {where_config}"
    if ca:
        ca = str(_path(ca))
        if not Path(ca).is_file():
            raise ConfigError(f"{ca_from}={ca!r}: no such file; name the PEM file of the certificates to trust "
                              "(the CA that signed the endpoint's certificate), or unset it")
    return AwsSettings(endpoint=endpoint, endpoint_from=endpoint_from, region=region, key_id=key_id, secret=secret,
                       token=token, credentials_from=creds_from, ca_bundle=ca or None, ca_from=ca_from if ca else "",
                       profile=profile if (from_creds is not None or from_config is not None) else None,
                       ignore_endpoints=ignore)


def missing_credentials(environ: Mapping[str, str] | None = None) -> list[str]:
    """The variables missing for credentials: [] when both keys are set, a profile holds keys, or role
    variables are set; else those of KEYS not set. Raises ConfigError: as read_settings."""
    env = os.environ if environ is None else environ
    settings = read_settings(env)
    if settings.key_id and settings.secret:
        return []
    if any(env.get(v) for v in KEYS):   # one of the two: the other is missing, whatever a profile holds
        return [v for v in KEYS if not env.get(v)]
    if any(env.get(v) for v in ROLE_VARIABLES):
        return []
    return list(KEYS)


def _credentials(env: Mapping[str, str], from_creds: dict | None, from_config: dict | None, where_creds: str,
                 where_config: str, profile: str) -> tuple[str | None, str | None, str | None, str]:
    """(key id, secret, token, where) from the environment or the profile; (None, None, None, "") when neither holds both keys."""
    if env.get(KEYS[0]) or env.get(KEYS[1]):
        if env.get(KEYS[0]) and env.get(KEYS[1]):
            return env[KEYS[0]], env[KEYS[1]], env.get("AWS_SESSION_TOKEN") or env.get("AWS_SECURITY_TOKEN") or None, KEYS[0]
        return None, None, None, ""   # one of the two: named as missing by missing_credentials
    for section, where in ((from_creds, where_creds), (from_config, where_config)):
        if section and section.get("aws_access_key_id") and section.get("aws_secret_access_key"):
            return section["aws_access_key_id"], section["aws_secret_access_key"], \
                section.get("aws_session_token") or None, where
    if any(env.get(v) for v in ROLE_VARIABLES):
        return None, None, None, ""
    for section, where in ((from_creds, where_creds), (from_config, where_config)):
        indirect = [text for key, text in INDIRECT.items() if section and section.get(key)]
        if indirect:
            raise ConfigError(f"{where} gets its credentials by {indirect[0]}, which longbert does not do itself; "
                              f"export them first: eval \"$(aws configure export-credentials --profile {profile} "
                              "--format env)\", or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
    return None, None, None, ""


def _path(text: str) -> Path:
    return Path(os.path.expanduser(text))


def _parse(path: Path) -> configparser.ConfigParser | None:
    """The INI file at ``path`` (None when there is none). Raises ConfigError: not an INI file."""
    if not path.is_file():
        return None
    parser = configparser.ConfigParser(interpolation=None, default_section="\x00none")
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: not an AWS settings file ({type(err).__name__}: "
                          f"{str(err).splitlines()[0][:200]}); fix it, or point AWS_CONFIG_FILE / "
                          "AWS_SHARED_CREDENTIALS_FILE elsewhere") from None
    return parser


def _section(path: Path, name: str) -> dict | None:
    parser = _parse(path)
    return None if parser is None or not parser.has_section(name) else dict(parser.items(name))


def _has(path: Path, name: str) -> bool:
    parser = _parse(path)
    return parser is not None and parser.has_section(name)


def _profiles(creds_file: Path, config_file: Path) -> list[str]:
    names = []
    for path, prefix in ((creds_file, ""), (config_file, "profile ")):
        parser = _parse(path)
        for section in parser.sections() if parser else []:
            name = section[len(prefix):] if section.startswith(prefix) else section if section == "default" else None
            if name and name not in names:
                names.append(name)
    return names


def _services_s3_endpoint(config_file: Path, profile: dict) -> str | None:
    """The ``endpoint_url`` under ``s3 =`` in the profile's ``[services NAME]`` section, or None:
    [services local]
    s3 =
      endpoint_url = http://localhost:9000
    """
    name = profile.get("services")
    section = _section(config_file, f"services {name}") if name else None
    for line in (section or {}).get("s3", "").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "endpoint_url" and value.strip():
            return value.strip()
    return None
