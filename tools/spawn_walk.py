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

"""Walk a call as it runs: every call that crosses a module of a package.

doc/source/admin/code-layout.rst walks a GPU spawn from ``driver.spawn`` to
the daemon; this measures that walk instead of counting it by reading
(``tests/functional/test_spawn_walk.py`` runs a real GPU spawn under it;
``NOVA_LXD_ACCEL_SPAWN_WALK=<file>`` writes what it saw there)::

    with spawn_walk.Walk('nova_lxd_accel', 'LXDDriver.spawn') as walk:
        ...                     # the spawn
    print(walk.report())

A *crossing* is a call from a function of one module of the package into a
function of another (calls within a module, and into or out of other
packages, are not counted; a comprehension is part of its function).
Only calls made under the named root function count: nova's other
greenthreads run in the same OS thread, and the profile hook sees their
calls too. ``chain(target)`` is the stack of
package functions from the root to the first call of ``target`` (for a
spawn: the daemon's create), and ``unnamed_hops`` lists the hops of that
chain whose call site does not name the function it reaches: a hop an
editor's go-to-definition cannot follow (a callable handed in, a lookup
by name).
"""

import dataclasses
import linecache
import sys


@dataclasses.dataclass(frozen=True)
class Hop:
    """One call from a function of the package into another's."""

    caller: str         # module.qualname
    callee: str         # module.qualname
    site: str           # the caller's source line, stripped
    name: str           # the callee's own name (its code object's)
    caller_module: str
    callee_module: str


def _hop(caller, callee):
    return Hop(_qualname(caller), _qualname(callee), _site(caller),
               callee.f_code.co_name, _module(caller), _module(callee))


#: frames of a comprehension: part of the function that holds them
COMPREHENSIONS = ('<genexpr>', '<listcomp>', '<dictcomp>', '<setcomp>')


def _qualname(frame):
    code = frame.f_code
    name = getattr(code, 'co_qualname', code.co_name)
    for inner in COMPREHENSIONS:
        name = name.replace('.<locals>.' + inner, '')
    return '%s.%s' % (frame.f_globals.get('__name__', '?'), name)


def _module(frame):
    return frame.f_globals.get('__name__', '')


def _site(frame):
    """The source line of the call ``frame`` is making, and the next.

    A call may span lines; the name of the function called is most often
    on the first or the second.
    """
    lines = [linecache.getline(frame.f_code.co_filename, n).strip()
             for n in (frame.f_lineno, frame.f_lineno + 1)]
    return ' '.join(line for line in lines if line)


class Walk(object):
    """Record the crossings of ``package``'s modules under ``root``.

    :param package: the package whose modules count ('nova_lxd_accel').
    :param root: ``Class.function`` (a qualname) the walk starts at.
    :param target: qualname suffix where :meth:`chain` stops.
    """

    def __init__(self, package, root, target=None):
        self.package = package
        self.root = root
        self.target = target
        #: the crossings, in call order
        self.hops = []
        #: the package's frames from the root to the target's first call
        self.target_chain = None
        self._previous = None

    def _ours(self, frame):
        name = _module(frame)
        return name == self.package or name.startswith(self.package + '.')

    def _package_stack(self, frame):
        """Package frames from the root to ``frame``; None: not under it."""
        stack = []
        while frame is not None:
            if self._ours(frame):
                stack.append(frame)
                if _qualname(frame).endswith('.' + self.root):
                    return list(reversed(stack))
            frame = frame.f_back
        return None

    def _profile(self, frame, event, arg):
        if event != 'call' or not self._ours(frame) or \
                frame.f_code.co_name in COMPREHENSIONS:
            return
        caller = frame.f_back
        # the nearest package frame above: a call through contextlib or
        # functools is still the package calling itself
        while caller is not None and not self._ours(caller):
            caller = caller.f_back
        if caller is None:
            return
        crossing = _module(caller) != _module(frame)
        at_target = self.target and self.target_chain is None and \
            _qualname(frame).endswith(self.target)
        if not (crossing or at_target):
            return
        stack = self._package_stack(frame)
        if stack is None:
            return
        if crossing:
            self.hops.append(_hop(caller, frame))
        if at_target:
            self.target_chain = [_hop(a, b) for a, b in zip(stack, stack[1:])]

    def __enter__(self):
        self._previous = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc):
        sys.setprofile(self._previous)
        return False

    # -- what was seen -----------------------------------------------------

    def modules(self):
        """Every module the walk went through (the root's included)."""
        return {m for hop in self.hops
                for m in (hop.caller_module, hop.callee_module)}

    def returns_to(self, module):
        """How many crossings start again from ``module`` after another's."""
        count, last = 0, None
        for hop in self.hops:
            if hop.caller_module == module and last not in (None, module):
                count += 1
            last = hop.callee_module
        return count

    def chain(self):
        """The hops from the root to the target's first call."""
        return list(self.target_chain or ())

    def unnamed_hops(self):
        """Hops of :meth:`chain` whose call site does not name the callee.

        ``__init__`` is named by its class, a ``with`` names the context
        manager's function, and a decorator's wrapper (a function of
        ``<locals>``) by the function it wraps: the call site names that
        one, which go-to-definition finds, so the hop from the wrapper
        into it is not one of its own.
        """
        chain = self.chain()
        out = []
        index = 0
        while index < len(chain):
            hop = chain[index]
            names = {hop.name}
            if hop.name == '__init__':
                names.add(hop.callee.rsplit('.', 2)[-2])
            if '<locals>' in hop.callee and index + 1 < len(chain):
                # the wrapper: named by what it wraps, the next hop
                names.add(chain[index + 1].name)
                index += 1
            if not any(name in hop.site for name in names):
                out.append(hop)
            index += 1
        return out

    def report(self):
        """The walk as lines of text, with its counts."""
        package = self.package + '.'
        lines = ['%3d  %s -> %s' % (n, hop.caller.replace(package, ''),
                                    hop.callee.replace(package, ''))
                 for n, hop in enumerate(self.hops, 1)]
        lines.append('')
        lines.append('%d calls across a module boundary, through %d '
                     'modules' % (len(self.hops), len(self.modules())))
        chain = self.chain()
        if chain:
            lines.append('')
            lines.append('From %s to %s, %d hops:' % (
                self.root, self.target, len(chain)))
            lines.extend('     %s -> %s   [%s]' % (
                hop.caller.replace(package, ''),
                hop.callee.replace(package, ''), hop.site) for hop in chain)
            unnamed = self.unnamed_hops()
            lines.append('%d of them not named at their call site%s' % (
                len(unnamed), ': ' + ', '.join(
                    h.callee.replace(package, '') for h in unnamed)
                if unnamed else ''))
        return '\n'.join(lines) + '\n'
