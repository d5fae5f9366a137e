from specsim.cli import run

run()
