"""A client of `signet serve` on PyPI's varlink library (its Client, the parser of the
interface description the service returns), for ServiceCLITests.

  varlink_client.py call ADDRESS METHOD [JSON] [--more]
      One call on a fresh connection: each reply a JSON line, then {"seconds": S} (the call's
      own time, connection and interface description before it left out). An error reply is
      the line {"error": NAME, "parameters": {...}}.
  varlink_client.py status-times ADDRESS N
      N Status calls on one connection: {"seconds": [...]}.
  varlink_client.py drop ADDRESS
      Install with more: the first reply is printed, then the connection closes mid-install.
"""

import json
import sys
import time

import varlink


def open_interface(address):
    client = varlink.Client.new_with_address(address)
    return client, client.open("io.signet.Update")


def call(address, method, arguments, more):
    client, connection = open_interface(address)
    start = time.monotonic()
    try:
        call = getattr(connection, method)
        if more:
            for reply in call(_more=True, **arguments):
                print(json.dumps(reply, sort_keys=True), flush=True)
        else:
            print(json.dumps(call(**arguments), sort_keys=True), flush=True)
    except varlink.VarlinkError as error:
        print(json.dumps({"error": error.error(), "parameters": error.parameters()}, sort_keys=True), flush=True)
    print(json.dumps({"seconds": time.monotonic() - start}), flush=True)
    connection.close()
    client.cleanup()


def status_times(address, count):
    client, connection = open_interface(address)
    times = []
    for _ in range(count):
        start = time.monotonic()
        reply = connection.Status()
        times.append(time.monotonic() - start)
        assert "destination" in reply, reply
    print(json.dumps({"seconds": times, "last": reply}, sort_keys=True), flush=True)
    connection.close()
    client.cleanup()


def drop(address):
    client, connection = open_interface(address)
    replies = connection.Install(_more=True)
    print(json.dumps(next(replies), sort_keys=True), flush=True)
    # Gone mid-install, without a word: the socket closes under the service's next reply.
    connection._connection.close()


def main():
    action, address = sys.argv[1], sys.argv[2]
    if action == "call":
        rest = sys.argv[4:]
        more = "--more" in rest
        rest = [word for word in rest if word != "--more"]
        call(address, sys.argv[3], json.loads(rest[0]) if rest else {}, more)
    elif action == "status-times":
        status_times(address, int(sys.argv[3]))
    elif action == "drop":
        drop(address)
    else:
        sys.exit("unknown action " + action)


if __name__ == "__main__":
    main()
