"""The catalog: TPU facts (systems, shapes, zones), names, ports, metric names, cloud limits, image references,
price arithmetic and the GPU-to-TPU replacements, as data and pure functions, with the small readers every layer
shares (wire values, text from outside, bounded JSON files). It imports no Pulumi, no pydantic and nothing of tpuray
outside itself, so the Pulumi program, the config, the planners, the tools and ``tpuray.workloads`` all read the same
facts.
"""
