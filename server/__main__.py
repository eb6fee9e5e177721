"""`python -m perflsp.server [--stdio] [--tcp HOST:PORT]`: the server without the CLI around it."""
import argparse
import sys

from perflsp.server import main

parser = argparse.ArgumentParser(prog="python -m perflsp.server")
parser.add_argument("--stdio", action="store_true", help="talk over stdin/stdout (the default)")
parser.add_argument("--tcp", metavar="HOST:PORT", help="listen on a TCP address instead")
args = parser.parse_args()
sys.exit(main(tcp=args.tcp))
