[
  inputs: [
    "{mix,.formatter}.exs",
    "{config,lib,test}/**/*.{ex,exs}",
    "bench/{lib,test}/**/*.{ex,exs}",
    ".ci/*.{ex,exs}"
  ]
]
