; Inno Setup script around the PyInstaller folder: a per-user install (no admin prompt), a Start-menu
; entry, an optional desktop icon, and an uninstaller that removes the program but leaves the user's
; chats (%LOCALAPPDATA%\offline-assistant) unless they tick the box on the last page.
;
; Build (on Windows, from the repository root, after packaging\windows\build.ps1 made dist\offline-assistant):
;     "C:\Program Files (x86)\Inno Setup 6\ISCC.exe" /DAppVersion=0.1.0 packaging\windows\offline-assistant.iss
; Output: dist\offline-assistant-0.1.0-windows-x64-setup.exe

#ifndef AppVersion
  #define AppVersion "0.1.0"
#endif
#define AppName "Offline Assistant"
#define AppExe "assistant-gui.exe"
#define SourceDir "..\..\dist\offline-assistant"

[Setup]
; A fixed AppId: upgrades replace the previous install instead of adding a second one.
AppId={{6F1C8E0A-2B1D-4C55-9E7A-0D4B8C2A91F3}
AppName={#AppName}
AppVersion={#AppVersion}
AppPublisher=Offline Assistant
DefaultDirName={localappdata}\Programs\offline-assistant
DefaultGroupName={#AppName}
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir=..\..\dist
OutputBaseFilename=offline-assistant-{#AppVersion}-windows-x64-setup
SetupIconFile=..\..\assets\icon.ico
UninstallDisplayIcon={app}\{#AppExe}
; The GGUF models are already compressed: lzma2 on them costs minutes for a few percent.
Compression=lzma2/fast
SolidCompression=no
WizardStyle=modern
ShowLanguageDialog=auto
CloseApplications=yes

[Languages]
Name: "en"; MessagesFile: "compiler:Default.isl"
Name: "zh_CN"; MessagesFile: "compiler:Languages\ChineseSimplified.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
Source: "{#SourceDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{group}\{#AppName}"; Filename: "{app}\{#AppExe}"
Name: "{group}\{cm:UninstallProgram,{#AppName}}"; Filename: "{uninstallexe}"
Name: "{autodesktop}\{#AppName}"; Filename: "{app}\{#AppExe}"; Tasks: desktopicon

[Run]
Filename: "{app}\{#AppExe}"; Description: "{cm:LaunchProgram,{#AppName}}"; Flags: nowait postinstall skipifsilent

[UninstallDelete]
; Only what the program folder may hold besides installed files (none expected: the app writes
; to %LOCALAPPDATA%\offline-assistant, never to {app}).
Type: filesandordirs; Name: "{app}\_internal\__pycache__"

[Code]
var
  RemoveData: Boolean;

function InitializeUninstall(): Boolean;
begin
  RemoveData := MsgBox('Also delete your chats, memories and downloaded models?' + #13#10 +
    ExpandConstant('{localappdata}\offline-assistant'), mbConfirmation, MB_YESNO or MB_DEFBUTTON2) = IDYES;
  Result := True;
end;

procedure CurUninstallStepChanged(CurUninstallStep: TUninstallStep);
begin
  if (CurUninstallStep = usPostUninstall) and RemoveData then
    DelTree(ExpandConstant('{localappdata}\offline-assistant'), True, True, True);
end;
