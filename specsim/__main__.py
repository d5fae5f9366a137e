from specsim._console import run

run()
