"""Wanted lines (`# wanted`) reached through generators, exceptions and plain calls; `seen`
collects the recorder's active line whenever `probe` runs (it is not wanted code)."""
seen = []
recorder = None


def probe():
    seen.append(recorder.counts.active)
    return 0


def numbers(n):
    for i in range(n):
        yield i  # wanted: yield


def fails():
    raise ValueError("wanted frames unwind")  # wanted: raise


def swallow():
    try:
        fails()
    except ValueError:
        pass
    return 0


def step():
    total = sum(numbers(3))  # wanted: sum
    first = next(numbers(3)) + probe()  # wanted: abandoned generator
    kept = swallow() + probe()  # wanted: after an unwind
    return total + first + kept
