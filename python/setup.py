"""Builds batchwise's engine, the extension batchwise._engine, with the project's CMake build
(../CMakeLists.txt, target batchwise_python) against the torch installed in this environment:

    pip install --no-build-isolation ./python        # from a batchwise checkout; a wheel: pip wheel ...

--no-build-isolation: the engine links the very libtorch this environment imports (as every LibTorch
extension must), so the build has to see it. Without torch (or with BATCHWISE_NO_ENGINE=1) the
package is the --cmd helpers alone, standard library only, as before.
  BATCHWISE_BUILD_DIR=build   reuse (and update) an existing CMake build directory
  BATCHWISE_ENGINE=path.so    package an engine built already instead of building one
"""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        prebuilt = os.environ.get("BATCHWISE_ENGINE")
        if prebuilt:
            shutil.copyfile(prebuilt, target)
            return
        if not os.path.exists(os.path.join(ROOT, "CMakeLists.txt")):
            sys.exit(f"batchwise: the engine builds from a batchwise checkout; {ROOT} has no CMakeLists.txt "
                     "(set BATCHWISE_NO_ENGINE=1 for the --cmd helpers alone)")
        import torch.utils
        build = os.environ.get("BATCHWISE_BUILD_DIR") or os.path.join(os.path.abspath(self.build_temp), "cmake")
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                                   f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
                                   f"-DBATCHWISE_PYTHON_EXECUTABLE={sys.executable}", "-DBATCHWISE_BUILD_PYTHON=ON",
                                   "-DBATCHWISE_BUILD_TESTS=OFF", "-DBATCHWISE_BUILD_TOOLS=OFF"])
        subprocess.check_call(["cmake", "--build", build, "--target", "batchwise_python",
                               "--parallel", str(os.cpu_count() or 1)])
        built = glob.glob(os.path.join(build, "python", "batchwise", "_engine*.so"))
        if not built:
            sys.exit(f"batchwise: {build} built no python/batchwise/_engine*.so")
        shutil.copyfile(built[0], target)


def engine():
    if os.environ.get("BATCHWISE_NO_ENGINE") == "1":
        return []
    try:
        import torch  # noqa: F401
    except ImportError:
        print("batchwise: torch is not importable here, so the package is built without its engine (the --cmd "
              "helpers only); for batchwise.fit/sweep/tune run `pip install --no-build-isolation ./python` in the "
              "environment that has torch", file=sys.stderr)
        return []
    return [Extension("batchwise._engine", sources=[])]


setup(ext_modules=engine(), cmdclass={"build_ext": CMakeBuild})
