"""Upload a run's exports and checkpoints to S3 (or any S3-compatible store) and the Hugging Face Hub, and read
them back from S3. One module a topic; import a name from the module that holds it:

    cosmos-train upload outputs/tiny-sft/20261124-1937 --to s3://my-bucket/cosmos/tiny
    cosmos-train upload RUN/safetensors/final --to hf://my-org/tiny-sft

    from cosmos_train.storage.s3 import s3_settings
    from cosmos_train.storage.s3_upload import upload_folder_s3
    from cosmos_train.storage.targets import parse_target
    upload_folder_s3(Path("RUN/safetensors/final"), parse_target("s3://my-bucket/cosmos/tiny/final"),
                     s3_settings(os.environ))

- `targets`: where an upload goes (`parse_target`: s3://bucket/prefix, hf://org/repo), the files a folder sends
  and their sha256, and the `UploadReport` of what an upload did;
- `s3`: reaching a store: `s3_settings` (the credentials, first found wins), `s3_client`, and what its errors mean
  (`s3_error`: refused, or unavailable and worth a retry); MANIFEST.json's name;
- `s3_upload`: `upload_folder_s3` (resumable, unchanged files skipped, MANIFEST.json last), `check_s3_target` (the
  `upload` command's bounded first request) and `put_file_s3` (one small file as it is now);
- `s3_download`: back from S3: `read_manifest`, `list_keys_s3`, `download_folder_s3` (checked against the
  manifest, renamed into place whole);
- `hub`: the Hugging Face Hub: `hf_token`, `upload_folder_hf`.

Refused credentials are an AuthError, another refusal (no such bucket, a bad name) an UploadError: user
errors, never retried. A lost connection, a timeout or a 5xx answer is an UploadUnavailable: a retry
may help, and a retry resumes where this attempt stopped.
"""
