import Foundation

/// The test PKI every HTTPS test server uses, made by the openssl CLI in a server's folder: a
/// private root (`root.pem`), an intermediate, a leaf for localhost only (`chain.pem`,
/// `leaf.key`), an expired leaf (`expired-chain.pem`), another root (`other-root.pem`), and
/// the folders `www/…` the servers serve.
///
/// The PKI itself is made once per test process (four RSA key generations: about 1.4 s of CPU
/// each time here, for each of some 30 servers a run starts) and copied into each server's
/// folder: servers of one process share a root, which no test can tell, since each trusts and
/// pins the root and leaf of the server it talks to, and `other-root.pem` stays the root none
/// of them is signed by.
public enum TestCertificates {
    public static func make(in d: String) throws {
        let template = try made.get()
        let copied = try run(
            "bash", ["-c", "set -e; cp -p '\(template)'/* '\(d)'/; cd '\(d)'; mkdir -p www/stall www/stallfirst www/norange www/whole tmp"]
        )
        guard copied.status == 0 else { throw SupportError("copying the test CA failed: \(copied.stderr)") }
    }

    /// The folder the process's PKI is made in, once; removed at exit.
    private static let made = Result { () throws -> String in
        let d = NSTemporaryDirectory() + "signet-test-pki-\(getpid())"
        try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        atexit { try? FileManager.default.removeItem(atPath: NSTemporaryDirectory() + "signet-test-pki-\(getpid())") }
        try generate(in: d)
        return d
    }

    private static func generate(in d: String) throws {
        let script = """
            set -e
            cd '\(d)'
            openssl req -x509 -newkey rsa:2048 -nodes -keyout root.key -out root.pem -days 30 -subj "/CN=Signet Test Root" -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
            openssl req -x509 -newkey rsa:2048 -nodes -keyout other-root.key -out other-root.pem -days 30 -subj "/CN=Other Root" -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
            openssl req -newkey rsa:2048 -nodes -keyout int.key -out int.csr -subj "/CN=Signet Test Intermediate"
            printf "basicConstraints=critical,CA:TRUE,pathlen:0\\nkeyUsage=critical,keyCertSign,cRLSign\\n" > int.ext
            openssl x509 -req -in int.csr -CA root.pem -CAkey root.key -CAcreateserial -out int.pem -days 30 -extfile int.ext
            openssl req -newkey rsa:2048 -nodes -keyout leaf.key -out leaf.csr -subj "/CN=localhost"
            printf "subjectAltName=DNS:localhost\\nextendedKeyUsage=serverAuth\\n" > leaf.ext
            openssl x509 -req -in leaf.csr -CA int.pem -CAkey int.key -CAcreateserial -out leaf.pem -days 30 -extfile leaf.ext
            cat leaf.pem int.pem > chain.pem
            openssl x509 -req -in leaf.csr -CA int.pem -CAkey int.key -CAcreateserial -out expired.pem -days -1 -extfile leaf.ext
            cat expired.pem int.pem > expired-chain.pem
            rm -f int.csr leaf.csr
            """
        let made = try run("bash", ["-c", script])
        guard made.status == 0 else { throw SupportError("making the test CA failed: \(made.stderr)") }
    }
}
