# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""``.. lxd-extra-specs::``: the reference of the ``lxd:`` flavor keys.

Rendered from ``nova_lxd_accel.extra_specs.lxd_keys.EXTRA_SPEC_VALIDATORS``, the
validators the Nova API enforces, so the page cannot drift from them: one
definition-list entry per key with its description and accepted values.
"""

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.parsers.rst import directives
from docutils import statemachine

_TYPES = {bool: 'boolean', int: 'integer', str: 'string'}


def accepted_values(value):
    """Human text for a validator's ``value`` dict."""
    kind = value['type']
    if kind is bool:
        return '``true`` or ``false``'
    parts = []
    if value.get('enum'):
        parts.append('one of %s' % ', '.join(
            '``%s``' % v for v in value['enum']))
    if 'min' in value or 'max' in value:
        bounds = []
        if 'min' in value:
            bounds.append('at least %s' % value['min'])
        if 'max' in value:
            bounds.append('at most %s' % value['max'])
        parts.append('an integer %s' % ' and '.join(bounds))
    if value.get('pattern'):
        parts.append('matching ``%s``' % value['pattern'])
    if not parts:
        parts.append('a %s' % _TYPES.get(kind, kind.__name__))
    return '; '.join(parts)


def render(validators):
    """reStructuredText lines for ``validators``."""
    lines = []
    for validator in sorted(validators, key=lambda v: v.name):
        lines.append('``%s``' % validator.name)
        lines.append('    %s' % validator.description)
        lines.append('')
        lines.append('    :Type: %s' % _TYPES.get(validator.value['type']))
        lines.append('    :Accepted values: %s' %
                     accepted_values(validator.value))
        lines.append('    :Example: ``openstack flavor set --property '
                     '%s=%s FLAVOR``' % (validator.name,
                                         _example(validator.value)))
        lines.append('')
    return lines


def _example(value):
    if value['type'] is bool:
        return 'true'
    if value.get('enum'):
        return value['enum'][-1]
    if value['type'] is int:
        return max(value.get('min', 1), 1000)
    return 'VALUE'


class LXDExtraSpecsDirective(Directive):
    """Renders the registered ``lxd:`` extra-spec validators."""

    has_content = False
    option_spec = {'module': directives.unchanged}

    def run(self):
        import importlib

        module = importlib.import_module(
            self.options.get('module', 'nova_lxd_accel.extra_specs.lxd_keys'))
        text = render(module.register())
        node = nodes.section()
        node.document = self.state.document
        self.state.nested_parse(
            statemachine.StringList(text, source='lxd-extra-specs'),
            self.content_offset, node)
        return node.children


def setup(app):
    app.add_directive('lxd-extra-specs', LXDExtraSpecsDirective)
    return {'parallel_read_safe': True, 'parallel_write_safe': True,
            'version': '1.0'}
