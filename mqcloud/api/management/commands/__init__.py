"""Commands: issueapitoken."""
