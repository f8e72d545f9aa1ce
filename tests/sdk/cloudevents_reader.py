"""Reads NATS messages with the CloudEvents Python SDK, as a CloudEvents consumer would.

Input (stdin), one JSON object per line: {"headers": {name: value}, "payload": base64}.
Output (stdout), one JSON object per line: the event's attributes as the SDK decoded them
(time in ISO 8601) and its data as the SDK parsed it.

The SDK has no NATS binding; its binary-mode reader (from_binary) applies the same rules the
CloudEvents NATS binding does: ce-prefixed headers are attributes, percent-decoded once;
content-type is the datacontenttype. A message the SDK rejects fails the run (exit 1).
"""

import base64
import json
import sys

from cloudevents.core.bindings.http import HTTPMessage, from_binary
from cloudevents.core.formats.json import JSONFormat


def main() -> int:
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        event = from_binary(
            HTTPMessage(headers=message["headers"], body=base64.b64decode(message["payload"])),
            JSONFormat(),
        )
        attributes = {
            name: (value.isoformat() if hasattr(value, "isoformat") else value)
            for name, value in event.get_attributes().items()
        }
        print(json.dumps({"attributes": attributes, "data": event.get_data()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
