"""Sphinx directives of the django_blueque docs.

``.. blueque-command:: bq_listen`` prints the command's ``--help`` as ``manage.py`` does, from
the command's own parser, so the reference cannot drift from the options."""

from django.core.management import load_command_class
from docutils import nodes
from sphinx.util.docutils import SphinxDirective


class CommandHelp(SphinxDirective):
    """The --help text of one django_blueque management command."""

    required_arguments = 1

    def run(self):
        name = self.arguments[0]
        command = load_command_class("django_blueque", name)
        parser = command.create_parser("manage.py", name)
        text = parser.format_help().rstrip()
        block = nodes.literal_block(text, text)
        block["language"] = "text"
        return [block]


def setup(app):
    app.add_directive("blueque-command", CommandHelp)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
