"""System checks: a malformed BLUEQUE setting fails ``manage.py check`` with an id and a hint."""

from django.core.checks import Error, Tags, register

from . import conf


@register(Tags.compatibility)
def check_settings(app_configs=None, **kwargs):
    return [Error(problem.msg, hint=problem.hint, id=problem.id, obj="settings.BLUEQUE")
            for problem in conf.problems()]
