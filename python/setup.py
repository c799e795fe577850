# The wheel carries a native library but no CPython extension: it is tagged
# py3-none-<platform> (e.g. linux_x86_64), so any Python 3 on this platform
# takes it and pip elsewhere does not. Everything else is in pyproject.toml.
from setuptools import setup

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel


class PlatformWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(cmdclass={"bdist_wheel": PlatformWheel})
