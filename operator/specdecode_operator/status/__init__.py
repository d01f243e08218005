"""Status of a SpecDecodeDeployment: pure condition computation (kstatus-compatible) and its server-side apply."""
