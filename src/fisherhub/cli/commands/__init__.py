"""The ``fisherhub`` sub-commands, one module each (``fisherhub.cli.build_parser`` finds them by iterating this
package): a module defines ``register(subparsers)``, which adds its parser and sets ``func``. A new command is
one new file here."""
