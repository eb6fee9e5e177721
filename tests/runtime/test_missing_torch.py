"""Profiling in an interpreter without torch is a usage error that names the interpreter."""
import subprocess


def test_missing_torch_is_a_clear_usage_error(tmp_path, python_without_torch):
    python = python_without_torch
    target = tmp_path / "t.py"
    target.write_text("def f(x):\n    return x\n\ndef inputs():\n    return (1,)\n")
    proc = subprocess.run([str(python), "-m", "perflsp.runtime", "profile", f"{target}:f", "--setup", f"{target}:inputs",
                           "--progress", "none", "--workspace", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"torch cannot be imported in {python}" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
