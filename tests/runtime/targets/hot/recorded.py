"""Runs a small pure-Python program under HotRecorder and prints the document as JSON.

`python recorded.py REPO_ROOT`: runs under any interpreter (3.12+ records with sys.monitoring,
older ones with sys.setprofile) without perflsp installed: the repository root is put on sys.path.
"""
import json
import os
import sys

sys.path.insert(0, sys.argv[1])
import importlib.util  # noqa: E402

spec = importlib.util.spec_from_file_location("hot_record", os.path.join(sys.argv[1], "runtime", "hot_record.py"))
hot_record = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hot_record)


class Model:
    def __init__(self):
        self.scale = 2

    def forward(self, x):
        return helper(x) * self.scale


def helper(x):
    return x + 1


def numbers(n):
    for i in range(n):
        yield i


def setup():
    return Model()


def step(model, x):
    return model.forward(x) + sum(numbers(3)) + sum(i for i in range(2)) + (lambda v: v)(1)


def main():
    recorder = hot_record.HotRecorder(os.path.dirname(os.path.abspath(__file__)), "recorded.py")
    recorder.start()
    model = setup()
    for i in range(10):
        recorder.target_called()
        step(model, i)
        if i == 4:
            recorder.pause()  # as the profiler does while it measures: steps 4-6 are not whole
        if i == 6:
            recorder.resume()
        if i == 8:
            json.dumps({})  # the standard library is never counted
    recorder.target_called()
    recorder.stop()
    print(json.dumps(recorder.document()))


main()
