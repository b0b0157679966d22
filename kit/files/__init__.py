"""Files and folders: where the kit's folders are, writes never half done, locks, downloads.

The repository's folders and paths as the kit prints them (paths), atomic and hashed
writes (files), one writer a folder (locks), downloads that resume and archives that
unpack safely with the record a download keeps (fetch, download_record), and which
checkout's kit a process imports (checkouts). The lowest room of the bottom layer: it
may import nothing else of the kit."""
