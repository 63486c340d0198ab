"""A user's first hour on the Hub, rehearsed: ``fisherhub first-hour`` (its help says every stage).

python scripts/first_hour.py BASE_MODEL --target DATA --index ORG/NAME            # reads only
python scripts/first_hour.py BASE_MODEL --target DATA --index ORG/NAME --push     # writes the index
"""

import sys

from fisherhub.cli import main

if __name__ == "__main__":
    sys.exit(main(["first-hour", *sys.argv[1:]]))
