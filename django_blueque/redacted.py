"""Redis URLs as they may be shown (checks, errors, the demo's output): without their password.

Standard library only, so that rundemo.py can use it before anything is installed.
"""

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"
SECRET_QUERY_KEYS = ("password",)  # redis-py also reads the password from the query string


def masked_url(url: str) -> str:
    """``url`` with its password (in the user part or the query string) replaced by ***."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            user, _sep, host = netloc.rpartition("@")
            netloc = f"{user.partition(':')[0]}:{MASK}@{host}"
        query = parts.query
        if query and any(k.lower() in SECRET_QUERY_KEYS for k, _ in parse_qsl(query)):
            query = urlencode([(k, MASK if k.lower() in SECRET_QUERY_KEYS else v)
                               for k, v in parse_qsl(query, keep_blank_values=True)],
                              safe="*")
        return urlunsplit(parts._replace(netloc=netloc, query=query))
    except ValueError:  # not parseable: hide whatever could be a user part
        return re.sub(r"//[^/@]*@", f"//{MASK}@", url)
