from exporter.app.cli import main

main()
