class TritonPythonModel:
    def initialize(self, args):
        raise ValueError("weights file is missing")

    def execute(self, requests):
        return []
