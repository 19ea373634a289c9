"""The Powertools side of the comparison (bench/powertools/run.sh, issue 3 item 11).

N distinct first calls, then N replays of the same keys, sequential, in this one process,
through AWS Lambda Powertools for Python's `idempotent_function` with its Redis persistence
layer (`RedisCachePersistenceLayer`) on a local Redis, under a fresh key prefix.

For each phase: `CONFIG RESETSTAT`, time the N calls, read `INFO commandstats` (the
`CONFIG RESETSTAT` itself excluded; `INFO` does not count itself). Prints one JSON line.
The keys under the prefix are deleted at the end.
"""

import argparse
import json
import sys
import time
import uuid
import warnings

import redis
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.persistence.redis import RedisCachePersistenceLayer


def commandstats(admin: redis.Redis) -> dict:
    stats = admin.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): int(fields["calls"])
        for name, fields in stats.items()
        if name != "cmdstat_config|resetstat"
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6379)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--prefix", default=f"ptools-cmp:{uuid.uuid4().hex}")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # no remaining-time warning outside Lambda, no deprecation

    client = redis.Redis(host=args.host, port=args.port, decode_responses=True)
    admin = redis.Redis(host=args.host, port=args.port, decode_responses=True)
    layer = RedisCachePersistenceLayer(client=client)
    config = IdempotencyConfig(expires_after_seconds=3600)

    @idempotent_function(
        data_keyword_argument="order",
        persistence_store=layer,
        config=config,
        key_prefix=args.prefix,
    )
    def send_refund(order: dict) -> dict:
        return {"refund_id": "re_" + order["order_id"], "amount_cents": order["amount_cents"]}

    def order(order_id: str) -> dict:
        return {"order_id": order_id, "amount_cents": 129900, "currency": "EUR"}

    for i in range(2):  # warm-up on other keys
        send_refund(order=order(f"warm_{i}"))
        send_refund(order=order(f"warm_{i}"))

    ids = [f"ord_{i:08}" for i in range(args.n)]
    phases = {}
    for phase in ("first", "replay"):
        admin.config_resetstat()
        start = time.perf_counter()
        for order_id in ids:
            receipt = send_refund(order=order(order_id))
            if receipt["refund_id"] != "re_" + order_id:
                print(f"wrong receipt for {order_id}: {receipt}", file=sys.stderr)
                return 1
        elapsed = time.perf_counter() - start
        stats = commandstats(admin)
        phases[phase] = {
            "us_per_call": elapsed * 1e6 / args.n,
            "commandstats_calls_per_call": sum(stats.values()) / args.n,
            "commandstats": stats,
        }

    keys = list(admin.scan_iter(match=args.prefix + "*", count=1000))
    for i in range(0, len(keys), 1000):
        admin.delete(*keys[i : i + 1000])
    print(json.dumps({"impl": "powertools", "n": args.n, "prefix": args.prefix, "phases": phases}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
