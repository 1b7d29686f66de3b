"""The target: Tenstorrent chips, ttnn's data formats, memory configurations, device layouts and call
spellings, and the device's number formats, as types. Imports nothing else of spc but its errors."""
