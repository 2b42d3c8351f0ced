"""``onnxplug plugins``: every plugin, where it came from, its providers and their devices."""

from __future__ import annotations

import argparse

from .._plugins import default_environment


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("plugins", help="list installed plugins, providers and devices")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    rows = default_environment().describe()
    if not rows:
        print("no onnxplug plugins installed (pip install onnxplug-cpu)")
        return 0
    for row in rows:
        print(f"{row['name']}  [{row['source']}]  {row['status']}")
        if row["error"]:
            print(f"    error: {row['error']}")
        for provider in row["providers"]:
            devices = ", ".join(provider["devices"]) or f"none ({provider['reason']})"
            print(f"    provider {provider['ort_name']} ({provider['name']}): devices: {devices}")
    return 0
